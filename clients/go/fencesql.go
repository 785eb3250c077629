// Fencing in an SQL database, over database/sql: the check and the write
// in one UPDATE, so the database's row lock makes them atomic.

package baton

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// Dialect is how the database spells parameters and wide integers.
type Dialect int

const (
	// PostgreSQL: $1, $2...; a token above 2^63-1 is cast to numeric.
	PostgreSQL Dialect = iota
	// MySQL and MariaDB: ?; a token above 2^63-1 is cast to UNSIGNED.
	MySQL
	// SQLite: ?; its integers stop at 2^63-1, so a larger token is refused.
	SQLite
)

// ErrNoRow: no row matches the fenced update's key columns.
var ErrNoRow = errors.New("baton: no row matches the fenced update")

// ErrTokenOutOfRange: the token does not fit the fence column; nothing
// was written (a column that clamped it would admit stale tokens later).
var ErrTokenOutOfRange = errors.New("baton: the token does not fit the fence column")

// Column is one column and its value.
type Column struct {
	Name  string
	Value any
}

// DB is what a fenced update runs on: *sql.DB, *sql.Tx and *sql.Conn.
type DB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// FencedUpdate is the fencing idiom for one row (or rows) of a table:
//
//	UPDATE <Table> SET <Set...>, fence = <Token>
//	 WHERE <Where...> AND fence <= <Token>
//
// Run it inside your transaction, first, and commit after it: it takes
// the row's lock, so a newer holder's fenced update waits for the commit
// and then sees this fence, and a stale one aborts before anything else
// was written. Roll back on ErrStaleToken. The fence column starts at 0
// (no token is 0); declare it numeric(20) (PostgreSQL) or BIGINT
// UNSIGNED (MySQL) to hold every token and set WideFence, or bigint to
// hold tokens up to 2^63-1 (today's tokens are near 2^60).
type FencedUpdate struct {
	Table       string
	Set         []Column
	Where       []Column // the key columns; at least one
	Token       uint64
	FenceColumn string // "fence" when empty
	// Strict admits only tokens above the fence (fence < token): each
	// grant writes once. Otherwise the same holder may write again.
	Strict  bool
	Dialect Dialect
	// WideFence says the fence column holds every u64 token
	// (numeric(20), BIGINT UNSIGNED); without it a token above 2^63-1 is
	// refused with ErrTokenOutOfRange before anything is written.
	WideFence bool
}

// identifier: table and column names are written into the statement,
// so only plain (optionally schema-qualified) names are taken.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

// Exec runs the update. nil: the write was admitted. A *StaleTokenError
// (errors.Is ErrStaleToken): a newer holder wrote, nothing changed.
// ErrNoRow: no row matches Where. ErrTokenOutOfRange, ErrInvalid, or the
// database's own error otherwise.
func (u FencedUpdate) Exec(ctx context.Context, db DB) error {
	stmt, args, err := u.statement()
	if err != nil {
		return err
	}
	res, err := db.ExecContext(ctx, stmt, args...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n > 0 {
		return err
	}
	// Nothing updated: a newer fence, no such row, or (MySQL counts
	// changed rows, not matched ones) the same holder writing the same
	// values again.
	return u.explainNoUpdate(ctx, db)
}

func (u FencedUpdate) fence() string {
	if u.FenceColumn == "" {
		return "fence"
	}
	return u.FenceColumn
}

// statement builds the UPDATE and its arguments.
func (u FencedUpdate) statement() (string, []any, error) {
	if err := u.check(); err != nil {
		return "", nil, err
	}
	token, err := u.tokenArg()
	if err != nil {
		return "", nil, err
	}
	var args []any
	param := func(v any) string {
		args = append(args, v)
		if u.Dialect == PostgreSQL {
			return "$" + strconv.Itoa(len(args))
		}
		return "?"
	}
	tokenParam := func() string { return u.castToken(param(token)) }
	var b strings.Builder
	b.WriteString("UPDATE " + u.Table + " SET ")
	for _, c := range u.Set {
		b.WriteString(c.Name + " = " + param(c.Value) + ", ")
	}
	b.WriteString(u.fence() + " = " + tokenParam() + " WHERE ")
	for _, c := range u.Where {
		b.WriteString(c.Name + " = " + param(c.Value) + " AND ")
	}
	op := " <= "
	if u.Strict {
		op = " < "
	}
	b.WriteString(u.fence() + op + tokenParam())
	return b.String(), args, nil
}

func (u FencedUpdate) check() error {
	if !identifier.MatchString(u.Table) || !identifier.MatchString(u.fence()) {
		return fmt.Errorf("%w: table and fence column must be plain names", ErrInvalid)
	}
	if len(u.Where) == 0 {
		return fmt.Errorf("%w: a fenced update needs key columns (Where)", ErrInvalid)
	}
	for _, c := range append(append([]Column(nil), u.Set...), u.Where...) {
		if !identifier.MatchString(c.Name) {
			return fmt.Errorf("%w: column %q is not a plain name", ErrInvalid, c.Name)
		}
	}
	if u.Token == 0 {
		return fmt.Errorf("%w: token 0 (tokens start at 1)", ErrInvalid)
	}
	return nil
}

// tokenArg is the token as database/sql can carry it: an int64, or
// decimal text for a wide fence column.
func (u FencedUpdate) tokenArg() (any, error) {
	if u.Token <= math.MaxInt64 {
		return int64(u.Token), nil
	}
	if !u.WideFence || u.Dialect == SQLite {
		return nil, fmt.Errorf("%w: token %d is above 2^63-1", ErrTokenOutOfRange, u.Token)
	}
	return strconv.FormatUint(u.Token, 10), nil
}

// castToken makes decimal text a number where the column is compared.
func (u FencedUpdate) castToken(p string) string {
	if u.Token <= math.MaxInt64 {
		return p
	}
	if u.Dialect == PostgreSQL {
		return "CAST(" + p + " AS numeric)"
	}
	return "CAST(" + p + " AS UNSIGNED)"
}

// explainNoUpdate tells a stale token from a missing row.
func (u FencedUpdate) explainNoUpdate(ctx context.Context, db DB) error {
	var args []any
	var b strings.Builder
	b.WriteString("SELECT COUNT(*), MAX(" + u.fence() + ") FROM " + u.Table + " WHERE ")
	for i, c := range u.Where {
		args = append(args, c.Value)
		if i > 0 {
			b.WriteString(" AND ")
		}
		p := "?"
		if u.Dialect == PostgreSQL {
			p = "$" + strconv.Itoa(len(args))
		}
		b.WriteString(c.Name + " = " + p)
	}
	var count int64
	var highest sql.NullString
	if err := db.QueryRowContext(ctx, b.String(), args...).Scan(&count, &highest); err != nil {
		return err
	}
	if count == 0 {
		return ErrNoRow
	}
	h, err := strconv.ParseUint(strings.TrimSuffix(highest.String, ".0"), 10, 64)
	if err != nil {
		return fmt.Errorf("baton: the fence column holds %q, not a token", highest.String)
	}
	if h == u.Token && !u.Strict {
		return nil // the same holder wrote the same values again
	}
	return &StaleTokenError{Token: u.Token, Highest: h}
}
