//! The fenced update on sqlx: PostgreSQL (feature `postgres`), MySQL and
//! MariaDB (`mysql`), SQLite (`sqlite`), on the connection or transaction
//! the service already has.
//!
//! ```no_run
//! # async fn demo(pool: sqlx::PgPool, token: u64) -> Result<(), baton_fence_sql::FenceError> {
//! use baton_fence_sql::{sqlx::update, FenceError, TokenColumn};
//!
//! // fence numeric(20): TokenColumn::Declared (the default) would find it
//! // in the catalog when a token is above 2^63-1; saying it saves the query.
//!
//! let mut tx = pool.begin().await?;
//! let written = update::<sqlx::Postgres>("accounts", token)
//!     .set("balance", 110_i64)
//!     .filter("id", 42_i64)
//!     .token_column(TokenColumn::Unsigned) // fence numeric(20)
//!     .execute(&mut *tx)
//!     .await;
//! match written {
//!     Ok(_rows) => tx.commit().await?,
//!     Err(FenceError::StaleToken { .. }) => { /* a newer holder wrote: stop */ }
//!     Err(e) => return Err(e),
//! }
//! # Ok(())
//! # }
//! ```

use ::sqlx::error::BoxDynError;
use ::sqlx::{
    Arguments, ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Row, Type,
};

use crate::plan::{self, Dialect, Piece};
use crate::{FenceError, FencedUpdate};

/// A value to bind, kept so that it can be bound again: the filter's
/// values go into the update and, when it changed nothing, into the probe.
pub struct Value<DB: Database>(Box<dyn Binder<DB>>);

impl<DB: Database> std::fmt::Debug for Value<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Value")
    }
}

/// Adds a copy of its value to a statement's arguments.
trait Binder<DB: Database>: Send + Sync {
    fn bind<'q>(&self, args: &mut DB::Arguments<'q>) -> Result<(), BoxDynError>;
}

struct Owned<T>(T);

impl<DB, T> Binder<DB> for Owned<T>
where
    DB: Database,
    T: for<'q> Encode<'q, DB> + Type<DB> + Clone + Send + Sync + 'static,
{
    fn bind<'q>(&self, args: &mut DB::Arguments<'q>) -> Result<(), BoxDynError> {
        args.add(self.0.clone())
    }
}

/// The databases sqlx reaches here, with what differs between them.
pub trait Backend: Database {
    /// The dialect of the statements.
    const DIALECT: Dialect;
    /// Rows the update matched (MySQL's sqlx connection counts found rows).
    fn rows_affected(result: &Self::QueryResult) -> u64;
}

#[cfg(feature = "postgres")]
impl Backend for ::sqlx::Postgres {
    const DIALECT: Dialect = Dialect::Postgres;
    fn rows_affected(result: &Self::QueryResult) -> u64 {
        result.rows_affected()
    }
}

#[cfg(feature = "mysql")]
impl Backend for ::sqlx::MySql {
    const DIALECT: Dialect = Dialect::MySql;
    fn rows_affected(result: &Self::QueryResult) -> u64 {
        result.rows_affected()
    }
}

#[cfg(feature = "sqlite")]
impl Backend for ::sqlx::Sqlite {
    const DIALECT: Dialect = Dialect::Sqlite;
    fn rows_affected(result: &Self::QueryResult) -> u64 {
        result.rows_affected()
    }
}

/// A fenced update of `table` with `token` on database `DB`: add
/// [`set`](FencedUpdate::set) and [`filter`](FencedUpdate::filter)
/// columns, then [`execute`](FencedUpdate::execute) it.
pub fn update<DB: Backend>(table: &str, token: u64) -> FencedUpdate<Value<DB>> {
    FencedUpdate::new(table, token)
}

impl<DB: Backend> FencedUpdate<Value<DB>> {
    /// Sets `column` to `value`.
    pub fn set<T>(self, column: &str, value: T) -> Self
    where
        T: for<'q> Encode<'q, DB> + Type<DB> + Clone + Send + Sync + 'static,
    {
        self.push_set(column, Value(Box::new(Owned(value))))
    }

    /// Writes only rows whose `column` equals `value` (filters are ANDed).
    pub fn filter<T>(self, column: &str, value: T) -> Self
    where
        T: for<'q> Encode<'q, DB> + Type<DB> + Clone + Send + Sync + 'static,
    {
        self.push_filter(column, Value(Box::new(Owned(value))))
    }

    /// Runs the update on `conn` (a connection, or `&mut *transaction`):
    /// the rows written, or why none was. The caller commits.
    pub async fn execute(&self, conn: &mut DB::Connection) -> Result<u64, FenceError>
    where
        for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
        for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
        String: for<'q> Encode<'q, DB> + Type<DB>,
        Option<String>: for<'r> Decode<'r, DB> + Type<DB>,
        usize: ColumnIndex<DB::Row>,
    {
        let valid = self.plan.validate(DB::DIALECT)?;
        if let Some(catalog) = plan::catalog(&valid, DB::DIALECT) {
            let (sql, args) = self.bind(&catalog)?;
            let row = ::sqlx::query_with(&sql, args)
                .fetch_optional(&mut *conn)
                .await?;
            let declared: Option<String> = match row {
                Some(row) => row.try_get(0)?,
                None => None,
            };
            plan::check_declared(&valid, declared.as_deref())?;
        }
        let statements = plan::statements(&valid, DB::DIALECT);
        let (sql, args) = self.bind(&statements.update)?;
        let result = ::sqlx::query_with(&sql, args).execute(&mut *conn).await?;
        let updated = DB::rows_affected(&result);
        if updated > 0 {
            return Ok(updated);
        }
        let (sql, args) = self.bind(&statements.probe)?;
        let row = ::sqlx::query_with(&sql, args).fetch_one(&mut *conn).await?;
        let count: Option<String> = row.try_get(0)?;
        let highest: Option<String> = row.try_get(1)?;
        plan::verdict(&valid, count.as_deref(), highest.as_deref())
    }

    /// The SQL of `pieces` with the driver's placeholders, and its arguments.
    fn bind<'q>(&self, pieces: &[Piece]) -> Result<(String, DB::Arguments<'q>), FenceError>
    where
        String: for<'a> Encode<'a, DB> + Type<DB>,
    {
        let mut sql = String::new();
        let mut args = DB::Arguments::<'q>::default();
        for piece in pieces {
            let bound = match (piece, self.value(piece)) {
                (Piece::Sql(text), _) => {
                    sql.push_str(text);
                    continue;
                }
                (Piece::Text(text), _) => args
                    .add(text.clone())
                    .map_err(|e| (self.plan.fence_column.as_str(), e)),
                (_, Some((column, value))) => value.0.bind(&mut args).map_err(|e| (column, e)),
                (_, None) => args
                    .add(self.plan.token.to_string())
                    .map_err(|e| (self.plan.fence_column.as_str(), e)),
            };
            bound.map_err(|(column, why)| FenceError::Bind {
                column: column.to_owned(),
                why: why.to_string(),
            })?;
            args.format_placeholder(&mut sql)
                .map_err(|e| FenceError::Bind {
                    column: self.plan.fence_column.clone(),
                    why: e.to_string(),
                })?;
        }
        Ok((sql, args))
    }
}
