//! The fenced update as SQL text, for each dialect, and what its outcome
//! means: pure, no driver. The drivers' modules walk the [`Piece`]s,
//! writing their own placeholders and binding their own values.

use crate::{FenceError, TokenColumn, Validated, SIGNED_BIGINT_MAX};

/// The SQL dialects the drivers speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// PostgreSQL: `$1` placeholders.
    Postgres,
    /// MySQL and MariaDB: `?` placeholders.
    MySql,
    /// SQLite: `?` placeholders; integers are signed 64-bit at most.
    Sqlite,
}

impl Dialect {
    /// The largest token this database can store in an integer fence
    /// column of the given kind.
    /// `Declared` is checked against the catalog later: here it is every
    /// token but on SQLite.
    pub fn max_token(self, column: TokenColumn) -> u64 {
        match self {
            // SQLite's INTEGER is signed 64-bit whatever the declared type.
            Dialect::Sqlite => SIGNED_BIGINT_MAX,
            Dialect::Postgres | Dialect::MySql => column.max_token().unwrap_or(u64::MAX),
        }
    }

    /// What goes around the token's placeholder. The token is bound as
    /// its decimal text and cast by the database: one binding for every
    /// column type (PostgreSQL `numeric(20)` has no native `u64`), after
    /// the range check has made sure the cast cannot overflow.
    fn token_cast(self) -> (&'static str, &'static str) {
        match self {
            Dialect::Postgres => ("CAST(", "::text AS numeric)"),
            Dialect::MySql => ("CAST(", " AS UNSIGNED)"),
            Dialect::Sqlite => ("CAST(", " AS INTEGER)"),
        }
    }

    /// The text type a probe's numbers are read back as, so that one
    /// decoding fits `bigint`, `numeric` and `BIGINT UNSIGNED` alike.
    fn text_type(self) -> &'static str {
        match self {
            Dialect::Postgres => "text",
            Dialect::MySql => "CHAR",
            Dialect::Sqlite => "TEXT",
        }
    }
}

/// One part of a statement: SQL text, or a value to bind at that place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// SQL text, written as is.
    Sql(String),
    /// The value of the `i`-th `set` column.
    Set(usize),
    /// The value of the `i`-th `filter` column.
    Filter(usize),
    /// The token, as decimal text.
    Token,
    /// A text value the statement itself binds (a name looked up in the
    /// catalog).
    Text(String),
}

/// The two statements of a fenced update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statements {
    /// `UPDATE t SET c = v, ..., fence = token WHERE f = w AND ... AND fence <= token`.
    pub update: Vec<Piece>,
    /// `SELECT COUNT(*), MAX(fence) FROM t WHERE f = w AND ...`, as text:
    /// why the update changed nothing.
    pub probe: Vec<Piece>,
}

/// Renders the statements of `plan` for `dialect`.
pub fn statements(plan: &Validated<'_>, dialect: Dialect) -> Statements {
    let (cast_open, cast_close) = dialect.token_cast();
    let token = |out: &mut Vec<Piece>| {
        out.push(Piece::Sql(cast_open.to_owned()));
        out.push(Piece::Token);
        out.push(Piece::Sql(cast_close.to_owned()));
    };
    let mut update = vec![Piece::Sql(format!("UPDATE {} SET ", plan.table))];
    for (i, column) in plan.sets.iter().enumerate() {
        update.push(Piece::Sql(format!("{column} = ")));
        update.push(Piece::Set(i));
        update.push(Piece::Sql(", ".to_owned()));
    }
    update.push(Piece::Sql(format!("{} = ", plan.fence)));
    token(&mut update);
    update.push(Piece::Sql(" WHERE ".to_owned()));
    filters(plan, &mut update);
    let cmp = if plan.reentrant { "<=" } else { "<" };
    update.push(Piece::Sql(format!(" AND {} {cmp} ", plan.fence)));
    token(&mut update);

    let text = dialect.text_type();
    let mut probe = vec![Piece::Sql(format!(
        "SELECT CAST(COUNT(*) AS {text}), CAST(MAX({}) AS {text}) FROM {} WHERE ",
        plan.fence, plan.table
    ))];
    filters(plan, &mut probe);
    Statements { update, probe }
}

fn filters(plan: &Validated<'_>, out: &mut Vec<Piece>) {
    for (i, column) in plan.filters.iter().enumerate() {
        let and = if i == 0 { "" } else { " AND " };
        out.push(Piece::Sql(format!("{and}{column} = ")));
        out.push(Piece::Filter(i));
    }
}

/// The query for the fence column's declared type, when the token's fit
/// must come from the catalog ([`TokenColumn::Declared`] and a token above
/// 2^63-1): one text column, or no row.
pub fn catalog(plan: &Validated<'_>, dialect: Dialect) -> Option<Vec<Piece>> {
    if !plan.needs_catalog {
        return None;
    }
    let sql = |s: &str| Piece::Sql(s.to_owned());
    let (table, fence) = (
        Piece::Text(plan.table.to_owned()),
        Piece::Text(plan.fence.to_owned()),
    );
    match dialect {
        // Unquoted names fold to lower case, as the update's do.
        Dialect::Postgres => Some(vec![
            sql("SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = CAST(CAST("),
            table,
            sql(" AS text) AS regclass) AND attname = lower("),
            fence,
            sql(") AND NOT attisdropped"),
        ]),
        Dialect::MySql => Some(vec![
            sql("SELECT CAST(COLUMN_TYPE AS CHAR) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = "),
            table,
            sql(" AND COLUMN_NAME = "),
            fence,
        ]),
        Dialect::Sqlite => None,
    }
}

/// Refuses the token if the fence column's `declared` type (the catalog's
/// answer; `None`: no such column) cannot hold it.
pub fn check_declared(plan: &Validated<'_>, declared: Option<&str>) -> Result<(), FenceError> {
    let max = declared_limit(declared);
    if plan.token > max {
        return Err(FenceError::TokenOutOfRange {
            token: plan.token,
            max,
        });
    }
    Ok(())
}

/// The largest token a column of the `declared` type holds, as the
/// catalog spells it (`numeric(20,0)`, `bigint(20) unsigned`...), when that
/// is more than a signed 64-bit integer; else [`SIGNED_BIGINT_MAX`], also
/// for a type not known here (only larger tokens ask).
pub fn declared_limit(declared: Option<&str>) -> u64 {
    let text = declared.unwrap_or_default().trim().to_ascii_lowercase();
    if text == "numeric" || text == "decimal" {
        return u64::MAX; // PostgreSQL's unconstrained numeric
    }
    if let Some(digits) = decimal_digits(&text) {
        // 10^20 - 1 > 2^64 - 1: twenty integral digits hold every token.
        return match 10_u64.checked_pow(digits) {
            None => u64::MAX,
            Some(p) => (p - 1).max(SIGNED_BIGINT_MAX),
        };
    }
    if text.starts_with("bigint") && text.contains("unsigned") {
        return u64::MAX;
    }
    SIGNED_BIGINT_MAX
}

/// The integral digits of `numeric(p)` / `decimal(p,s)`: p - s.
fn decimal_digits(text: &str) -> Option<u32> {
    let args = text
        .strip_prefix("numeric")
        .or_else(|| text.strip_prefix("decimal"))?
        .trim()
        .strip_prefix('(')?
        .strip_suffix(')')?;
    let mut parts = args.split(',').map(|p| p.trim().parse::<u32>());
    let precision = parts.next()?.ok()?;
    let scale = match parts.next() {
        Some(s) => s.ok()?,
        None => 0,
    };
    Some(precision.saturating_sub(scale))
}

/// What an update that changed no row meant, from the probe's two texts:
/// no row matched ([`FenceError::NoRow`]), a newer holder wrote
/// ([`FenceError::StaleToken`]), or the rows matched and already held
/// these values with this token (a driver that counts changed rows, not
/// matched ones): then the number of rows matched.
pub fn verdict(
    plan: &Validated<'_>,
    count: Option<&str>,
    highest: Option<&str>,
) -> Result<u64, FenceError> {
    let number = |text: Option<&str>| -> Result<Option<u64>, FenceError> {
        match text.map(str::trim) {
            None => Ok(None),
            Some(t) => t
                .parse::<u64>()
                .map(Some)
                .map_err(|_| FenceError::Unreadable(t.to_owned())),
        }
    };
    let count = number(count)?.unwrap_or(0);
    let (true, Some(highest)) = (count > 0, number(highest)?) else {
        return Err(FenceError::NoRow {
            table: plan.table.to_owned(),
        });
    };
    let admitted = plan.token > highest || (plan.reentrant && plan.token == highest);
    if !admitted {
        return Err(FenceError::StaleToken {
            token: plan.token,
            highest,
        });
    }
    Ok(count)
}

/// Renders `pieces` with `?` or `$n` placeholders: for tests and error
/// messages; the drivers write their own.
pub fn render(pieces: &[Piece], dialect: Dialect) -> String {
    let mut out = String::new();
    let mut n = 0;
    for piece in pieces {
        match piece {
            Piece::Sql(sql) => out.push_str(sql),
            _ => {
                n += 1;
                match dialect {
                    Dialect::Postgres => out.push_str(&format!("${n}")),
                    Dialect::MySql | Dialect::Sqlite => out.push('?'),
                }
            }
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;
    use crate::Plan;

    fn plan(token: u64) -> Plan {
        let mut plan = Plan::new("accounts", token);
        plan.sets.push("balance".to_owned());
        plan.filters.push("id".to_owned());
        plan
    }

    #[test]
    fn the_update_checks_and_writes_in_one_statement() {
        let plan = plan(7);
        let valid = plan.validate(Dialect::Postgres).unwrap();
        let st = statements(&valid, Dialect::Postgres);
        assert_eq!(
            render(&st.update, Dialect::Postgres),
            "UPDATE accounts SET balance = $1, fence = CAST($2::text AS numeric) \
             WHERE id = $3 AND fence <= CAST($4::text AS numeric)"
        );
        assert_eq!(
            render(&st.probe, Dialect::MySql),
            "SELECT CAST(COUNT(*) AS text), CAST(MAX(fence) AS text) FROM accounts WHERE id = ?"
        );
        let mut once = plan.clone();
        once.reentrant = false;
        once.filters.push("region".to_owned());
        let valid = once.validate(Dialect::MySql).unwrap();
        assert_eq!(
            render(&statements(&valid, Dialect::MySql).update, Dialect::MySql),
            "UPDATE accounts SET balance = ?, fence = CAST(? AS UNSIGNED) \
             WHERE id = ? AND region = ? AND fence < CAST(? AS UNSIGNED)"
        );
    }

    #[test]
    fn tokens_the_column_cannot_hold_are_refused() {
        let signed_max = i64::MAX as u64;
        let mut signed = plan(signed_max);
        signed.column = TokenColumn::Signed;
        assert!(signed.validate(Dialect::Postgres).is_ok());
        signed.token += 1;
        assert!(matches!(
            signed.validate(Dialect::Postgres),
            Err(FenceError::TokenOutOfRange { max, .. }) if max == signed_max
        ));
        let mut wide = plan(u64::MAX);
        wide.column = TokenColumn::Unsigned;
        assert!(!wide.validate(Dialect::MySql).unwrap().needs_catalog);
        assert!(wide.validate(Dialect::Postgres).is_ok());
        // SQLite has no unsigned 64-bit integers, whatever is declared.
        for column in [TokenColumn::Unsigned, TokenColumn::Declared] {
            wide.column = column;
            assert!(matches!(
                wide.validate(Dialect::Sqlite),
                Err(FenceError::TokenOutOfRange { .. })
            ));
        }
        assert!(matches!(
            plan(0).validate(Dialect::Sqlite),
            Err(FenceError::NotAToken)
        ));
    }

    #[test]
    fn the_catalog_is_asked_only_about_tokens_above_2_pow_63() {
        let low = plan(i64::MAX as u64);
        let low = low.validate(Dialect::Postgres).unwrap();
        assert!(catalog(&low, Dialect::Postgres).is_none());
        let high = plan(i64::MAX as u64 + 5);
        let valid = high.validate(Dialect::MySql).unwrap();
        let query = catalog(&valid, Dialect::MySql).unwrap();
        assert_eq!(
            render(&query, Dialect::MySql),
            "SELECT CAST(COLUMN_TYPE AS CHAR) FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = ?"
        );
        assert!(query.contains(&Piece::Text("accounts".to_owned())));
        for wide in [
            "numeric(20,0)",
            "numeric",
            "bigint(20) unsigned",
            "decimal(20,0)",
        ] {
            assert!(check_declared(&valid, Some(wide)).is_ok(), "{wide}");
        }
        for narrow in [
            "bigint",
            "integer",
            "numeric(18,0)",
            "text",
            "numeric(20,2)",
        ] {
            assert!(
                matches!(
                    check_declared(&valid, Some(narrow)),
                    Err(FenceError::TokenOutOfRange { .. })
                ),
                "{narrow}"
            );
        }
        assert!(check_declared(&valid, None).is_err(), "no such column");
        assert_eq!(
            declared_limit(Some("numeric(19)")),
            9_999_999_999_999_999_999
        );
        assert_eq!(declared_limit(Some("numeric(25, 0)")), u64::MAX);
    }

    #[test]
    fn only_plain_identifiers_and_a_filter_are_accepted() {
        let mut bad = plan(1);
        bad.table = "accounts; DROP TABLE accounts".to_owned();
        assert!(matches!(
            bad.validate(Dialect::Sqlite),
            Err(FenceError::Identifier(_))
        ));
        let mut bad = plan(1);
        bad.sets.push("a b".to_owned());
        assert!(matches!(
            bad.validate(Dialect::Sqlite),
            Err(FenceError::Identifier(_))
        ));
        let mut none = plan(1);
        none.filters.clear();
        assert!(matches!(
            none.validate(Dialect::Sqlite),
            Err(FenceError::NoFilter)
        ));
    }

    #[test]
    fn the_probe_tells_stale_from_missing_from_unchanged() {
        let plan = plan(10);
        let valid = plan.validate(Dialect::MySql).unwrap();
        assert!(matches!(
            verdict(&valid, Some("1"), Some("11")),
            Err(FenceError::StaleToken {
                token: 10,
                highest: 11
            })
        ));
        assert!(matches!(
            verdict(&valid, Some("0"), None),
            Err(FenceError::NoRow { .. })
        ));
        // Matched, nothing changed: the same holder wrote the same values.
        assert_eq!(verdict(&valid, Some("1"), Some("10")).unwrap(), 1);
        assert!(matches!(
            verdict(&valid, Some("1"), Some("ten")),
            Err(FenceError::Unreadable(_))
        ));
        let mut once = plan.clone();
        once.reentrant = false;
        let valid = once.validate(Dialect::MySql).unwrap();
        assert!(matches!(
            verdict(&valid, Some("1"), Some("10")),
            Err(FenceError::StaleToken { .. })
        ));
    }
}
