package baton

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"math"
	"strings"
	"sync"
	"testing"
)

func TestFenceAdmitsTheNewestTokenOnly(t *testing.T) {
	var f Fence
	if err := f.Admit("orders/42", 1057); err != nil {
		t.Fatal(err)
	}
	if err := f.Admit("orders/42", 1057); err != nil {
		t.Fatal("the same holder again:", err)
	}
	if err := f.Admit("orders/42", 1060); err != nil {
		t.Fatal(err)
	}
	err := f.Admit("orders/42", 1057)
	var stale *StaleTokenError
	if !errors.Is(err, ErrStaleToken) || !errors.As(err, &stale) || stale.Highest != 1060 {
		t.Fatalf("stale token: %v", err)
	}
	if err := f.Admit("orders/43", 5); err != nil {
		t.Fatal("keys are fenced apart:", err)
	}
	wrote := false
	if err := f.Do("orders/42", 1059, func() error { wrote = true; return nil }); !errors.Is(err, ErrStaleToken) || wrote {
		t.Fatalf("Do with a stale token: %v, wrote %v", err, wrote)
	}
}

// rowsTable is the fake database behind the "fencetest" driver: the
// accounts table, id -> (balance, fence). It runs the fenced UPDATE of
// accounts(balance) by id and its follow-up SELECT, as a database would,
// and reports changed rows like MySQL when mysql is set.
type rowsTable struct {
	mu      sync.Mutex
	rows    map[int64][2]int64
	mysql   bool
	queries []string
}

var fakeTables sync.Map // DSN -> *rowsTable

func init() { sql.Register("fencetest", fakeDriver{}) }

type fakeDriver struct{}

func (fakeDriver) Open(dsn string) (driver.Conn, error) {
	t, _ := fakeTables.Load(dsn)
	return &fakeSQLConn{t.(*rowsTable)}, nil
}

type fakeSQLConn struct{ t *rowsTable }

func (c *fakeSQLConn) Prepare(q string) (driver.Stmt, error) { return &fakeStmt{c.t, q}, nil }
func (c *fakeSQLConn) Close() error                          { return nil }
func (c *fakeSQLConn) Begin() (driver.Tx, error)             { return nil, errors.New("no transactions") }

type fakeStmt struct {
	t *rowsTable
	q string
}

func (s *fakeStmt) Close() error  { return nil }
func (s *fakeStmt) NumInput() int { return -1 }

func (s *fakeStmt) Exec(args []driver.Value) (driver.Result, error) {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	s.t.queries = append(s.t.queries, s.q)
	balance, token, id := args[0].(int64), args[1].(int64), args[2].(int64)
	row, ok := s.t.rows[id]
	admitted := ok && (row[1] <= token && !strings.Contains(s.q, " < ") || row[1] < token)
	if !admitted {
		return driver.RowsAffected(0), nil
	}
	s.t.rows[id] = [2]int64{balance, token}
	if s.t.mysql && row == [2]int64{balance, token} {
		return driver.RowsAffected(0), nil
	}
	return driver.RowsAffected(1), nil
}

func (s *fakeStmt) Query(args []driver.Value) (driver.Rows, error) {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	s.t.queries = append(s.t.queries, s.q)
	row, ok := s.t.rows[args[0].(int64)]
	if !ok {
		return &fakeRows{vals: []driver.Value{int64(0), nil}}, nil
	}
	return &fakeRows{vals: []driver.Value{int64(1), row[1]}}, nil
}

type fakeRows struct {
	vals []driver.Value
	done bool
}

func (r *fakeRows) Columns() []string { return []string{"count", "max"} }
func (r *fakeRows) Close() error      { return nil }
func (r *fakeRows) Next(dest []driver.Value) error {
	if r.done {
		return io.EOF
	}
	r.done = true
	copy(dest, r.vals)
	return nil
}

func fakeDB(t *testing.T, mysql bool) (*sql.DB, *rowsTable) {
	table := &rowsTable{rows: map[int64][2]int64{42: {100, 0}}, mysql: mysql}
	fakeTables.Store(t.Name(), table)
	db, err := sql.Open("fencetest", t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, table
}

func update(token uint64, balance int64) FencedUpdate {
	return FencedUpdate{
		Table: "accounts", Token: token,
		Set:   []Column{{"balance", balance}},
		Where: []Column{{"id", int64(42)}},
	}
}

func TestFencedUpdateRefusesAStaleHolder(t *testing.T) {
	db, table := fakeDB(t, false)
	ctx := context.Background()
	// Kleppmann's scenario: B (the newer token) writes first, A's late write is refused.
	if err := update(1883367308239306754, 110).Exec(ctx, db); err != nil {
		t.Fatal(err)
	}
	err := update(1883367308239306753, 90).Exec(ctx, db)
	var stale *StaleTokenError
	if !errors.As(err, &stale) || stale.Highest != 1883367308239306754 || !errors.Is(err, ErrStaleToken) {
		t.Fatalf("stale write: %v", err)
	}
	if table.rows[42] != [2]int64{110, 1883367308239306754} {
		t.Fatalf("row %v", table.rows[42])
	}
	want := "UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence <= $4"
	if table.queries[0] != want {
		t.Fatalf("statement %q, want %q", table.queries[0], want)
	}
	if q := table.queries[len(table.queries)-1]; q != "SELECT COUNT(*), MAX(fence) FROM accounts WHERE id = $1" {
		t.Fatalf("follow-up %q", q)
	}
	missing := update(1883367308239306755, 1)
	missing.Where = []Column{{"id", int64(7)}}
	if err := missing.Exec(ctx, db); !errors.Is(err, ErrNoRow) {
		t.Fatalf("no such row: %v", err)
	}
}

func TestFencedUpdateSameHolderTwiceOnMySQL(t *testing.T) {
	db, table := fakeDB(t, true)
	ctx := context.Background()
	u := update(500, 110)
	u.Dialect = MySQL
	if err := u.Exec(ctx, db); err != nil {
		t.Fatal(err)
	}
	// The same values again: MySQL reports 0 changed rows; not stale.
	if err := u.Exec(ctx, db); err != nil {
		t.Fatal("the same holder writing the same values:", err)
	}
	if !strings.HasPrefix(table.queries[0], "UPDATE accounts SET balance = ?, fence = ? WHERE id = ? AND fence <= ?") {
		t.Fatal(table.queries[0])
	}
	u.Strict = true
	if err := u.Exec(ctx, db); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("strict: a grant writes once: %v", err)
	}
}

func TestFencedUpdateChecksItsArguments(t *testing.T) {
	db, table := fakeDB(t, false)
	ctx := context.Background()
	big := update(math.MaxInt64+1, 1)
	if err := big.Exec(ctx, db); !errors.Is(err, ErrTokenOutOfRange) {
		t.Fatalf("a token above 2^63-1 into a bigint fence: %v", err)
	}
	stmt, args, err := FencedUpdate{Table: "t", Token: math.MaxUint64, WideFence: true,
		Where: []Column{{"id", 1}}}.statement()
	if err != nil || stmt != "UPDATE t SET fence = CAST($1 AS numeric) WHERE id = $2 AND fence <= CAST($3 AS numeric)" ||
		args[0] != "18446744073709551615" {
		t.Fatalf("wide fence: %q %v %v", stmt, args, err)
	}
	for _, bad := range []FencedUpdate{
		{Table: "t; DROP TABLE x", Token: 1, Where: []Column{{"id", 1}}},
		{Table: "t", Token: 1},
		{Table: "t", Token: 0, Where: []Column{{"id", 1}}},
		{Table: "t", Token: 1, Where: []Column{{"id = 1 OR 1", 1}}},
	} {
		if err := bad.Exec(ctx, db); !errors.Is(err, ErrInvalid) {
			t.Fatalf("%+v: %v", bad, err)
		}
	}
	if len(table.queries) != 0 {
		t.Fatalf("sent %v", table.queries)
	}
}
