//! Fencing where the data lives: a SQL row takes a write only with a token
//! at least as high as the last one it took, checked and written in one
//! statement.
//!
//! A Baton token is greater than every token granted before it, so a
//! holder that paused past its lease (a GC pause, a stopped VM) wakes up
//! with a token lower than the one the next holder wrote, and its write is
//! refused instead of overwriting newer data:
//!
//! ```sql
//! UPDATE accounts SET balance = $1, fence = $token
//!  WHERE id = $2 AND fence <= $token
//! -- 0 rows: a newer holder wrote (or no row matched): nothing changed
//! ```
//!
//! The drivers, each a feature: module `sqlx` (features `postgres`,
//! `mysql`, `sqlite`) and module `tokio_postgres` (feature
//! `tokio-postgres`). Both build the same
//! statement and answer with the number of rows written, or
//! [`FenceError::StaleToken`], [`FenceError::NoRow`], or
//! [`FenceError::TokenOutOfRange`] before anything is sent when the fence
//! column cannot hold the token.
//!
//! # The fence column
//!
//! Tokens are unsigned 64-bit numbers and start near 2^60. Declare the
//! column to hold them all:
//!
//! | database | column | largest token |
//! |---|---|---|
//! | PostgreSQL | `numeric(20) NOT NULL DEFAULT 0` | 2^64-1 |
//! | PostgreSQL | `bigint NOT NULL DEFAULT 0` | 2^63-1 |
//! | MySQL, MariaDB | `BIGINT UNSIGNED NOT NULL DEFAULT 0` | 2^64-1 |
//! | MySQL, MariaDB | `BIGINT NOT NULL DEFAULT 0` | 2^63-1 |
//! | SQLite | `INTEGER NOT NULL DEFAULT 0` | 2^63-1 |
//!
//! A token above the column's limit is refused rather than sent: servers
//! clamp or wrap such values, and a fence that goes down admits stale
//! writers again. The limit is found in the database's catalog when it
//! matters ([`TokenColumn::Declared`], the default), or given.

pub mod plan;
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
pub mod sqlx;
#[cfg(feature = "tokio-postgres")]
pub mod tokio_postgres;
#[cfg(any(
    feature = "postgres",
    feature = "mysql",
    feature = "sqlite",
    feature = "tokio-postgres"
))]
mod update;

pub use plan::Dialect;
#[cfg(any(
    feature = "postgres",
    feature = "mysql",
    feature = "sqlite",
    feature = "tokio-postgres"
))]
pub use update::FencedUpdate;

/// The name of the fence column unless [`Plan::fence_column`] says otherwise.
pub const DEFAULT_FENCE_COLUMN: &str = "fence";

/// Why a fenced update wrote nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FenceError {
    /// A newer holder wrote: the caller's lease lapsed; it must stop
    /// touching the resource.
    #[error("token {token} is stale: the row has seen {highest}")]
    StaleToken {
        /// The caller's token.
        token: u64,
        /// The highest fence among the rows the filter matched.
        highest: u64,
    },
    /// No row matches the filter.
    #[error("no row of {table} matches the filter")]
    NoRow {
        /// The table updated.
        table: String,
    },
    /// The fence column cannot hold the token; nothing was sent.
    #[error(
        "token {token} does not fit the fence column (at most {max}): declare it numeric(20) \
         (PostgreSQL) or BIGINT UNSIGNED (MySQL)"
    )]
    TokenOutOfRange {
        /// The caller's token.
        token: u64,
        /// The largest token the column holds.
        max: u64,
    },
    /// Tokens start at 1; 0 is what a fence column holds before any write.
    #[error("0 is not a fencing token")]
    NotAToken,
    /// A table or column name that is not a plain SQL identifier.
    #[error("not a plain SQL identifier: {0:?}")]
    Identifier(String),
    /// An update must name the row(s) it writes.
    #[error("a fenced update needs a filter naming its row(s)")]
    NoFilter,
    /// The database answered the probe with something that is not a count
    /// or a token.
    #[error("the database read back {0:?} as a fence")]
    Unreadable(String),
    /// A value could not be bound.
    #[error("cannot bind the value of {column}: {why}")]
    Bind {
        /// The column whose value failed.
        column: String,
        /// The driver's reason.
        why: String,
    },
    /// The driver failed (connection, SQL, types).
    #[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
    #[error("database: {0}")]
    Sqlx(#[from] ::sqlx::Error),
    /// tokio-postgres failed (connection, SQL, types).
    #[cfg(feature = "tokio-postgres")]
    #[error("database: {0}")]
    Postgres(#[from] ::tokio_postgres::Error),
}

/// What the fence column is declared as, hence the largest token it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TokenColumn {
    /// Read from the database when it matters: every 64-bit column holds
    /// tokens up to 2^63-1, which go out as they are; for a larger token
    /// the fence column's declared type is read from the catalog
    /// (PostgreSQL `pg_attribute`, MySQL `information_schema.COLUMNS`), one
    /// query more. SQLite holds 2^63-1 at most.
    #[default]
    Declared,
    /// A signed 64-bit integer: PostgreSQL `bigint`, MySQL `BIGINT`,
    /// SQLite `INTEGER`. Holds tokens up to 2^63-1.
    Signed,
    /// PostgreSQL `numeric(20)`, MySQL `BIGINT UNSIGNED`: every token.
    Unsigned,
}

/// The largest token every 64-bit column holds, signed or not.
pub const SIGNED_BIGINT_MAX: u64 = i64::MAX as u64;

impl TokenColumn {
    /// The largest token such a column holds; `None` when the catalog says.
    ///
    /// ```
    /// use baton_fence_sql::TokenColumn;
    /// assert_eq!(TokenColumn::Signed.max_token(), Some(i64::MAX as u64));
    /// assert_eq!(TokenColumn::Unsigned.max_token(), Some(u64::MAX));
    /// assert_eq!(TokenColumn::Declared.max_token(), None);
    /// ```
    pub fn max_token(self) -> Option<u64> {
        match self {
            TokenColumn::Declared => None,
            TokenColumn::Signed => Some(SIGNED_BIGINT_MAX),
            TokenColumn::Unsigned => Some(u64::MAX),
        }
    }
}

/// A fenced update, driver aside: the table, the columns it sets and
/// filters on (their values are the driver's), the token, and the fence
/// column's name and type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The table updated.
    pub table: String,
    /// The columns set, in order.
    pub sets: Vec<String>,
    /// The columns the rows are picked by (`column = value`, ANDed).
    pub filters: Vec<String>,
    /// The caller's token.
    pub token: u64,
    /// The fence column's name ([`DEFAULT_FENCE_COLUMN`] unless set).
    pub fence_column: String,
    /// What the fence column is declared as.
    pub column: TokenColumn,
    /// Whether the same token may write again (`fence <= token`), or each
    /// grant only once (`fence < token`). Default: true.
    pub reentrant: bool,
}

impl Plan {
    /// An update of `table` with `token`, setting and filtering nothing yet.
    pub fn new(table: &str, token: u64) -> Plan {
        Plan {
            table: table.to_owned(),
            sets: Vec::new(),
            filters: Vec::new(),
            token,
            fence_column: DEFAULT_FENCE_COLUMN.to_owned(),
            column: TokenColumn::default(),
            reentrant: true,
        }
    }

    /// Checks the names, the filter and the token's range for `dialect`.
    pub fn validate(&self, dialect: Dialect) -> Result<Validated<'_>, FenceError> {
        for name in [&self.table, &self.fence_column]
            .into_iter()
            .chain(&self.sets)
            .chain(&self.filters)
        {
            if !is_identifier(name) {
                return Err(FenceError::Identifier(name.clone()));
            }
        }
        if self.filters.is_empty() {
            return Err(FenceError::NoFilter);
        }
        if self.token == 0 {
            return Err(FenceError::NotAToken);
        }
        let max = dialect.max_token(self.column);
        if self.token > max {
            return Err(FenceError::TokenOutOfRange {
                token: self.token,
                max,
            });
        }
        let column_unknown = self.column == TokenColumn::Declared && dialect != Dialect::Sqlite;
        Ok(Validated {
            table: &self.table,
            sets: &self.sets,
            filters: &self.filters,
            fence: &self.fence_column,
            token: self.token,
            reentrant: self.reentrant,
            needs_catalog: column_unknown && self.token > SIGNED_BIGINT_MAX,
        })
    }
}

/// A [`Plan`] whose names and token have been checked.
#[derive(Debug, Clone, Copy)]
pub struct Validated<'a> {
    table: &'a str,
    sets: &'a [String],
    filters: &'a [String],
    fence: &'a str,
    token: u64,
    reentrant: bool,
    /// Whether the token's fit must be read from the catalog.
    needs_catalog: bool,
}

/// A plain SQL identifier: a letter or `_`, then letters, digits or `_`;
/// at most 63 bytes (PostgreSQL's limit). Names are written into the SQL,
/// never bound, so nothing else may pass.
fn is_identifier(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && name.len() <= 63
}
