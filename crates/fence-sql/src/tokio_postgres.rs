//! The fenced update on tokio-postgres (feature `tokio-postgres`), on a
//! `Client` or a `Transaction`.
//!
//! ```no_run
//! # async fn demo(client: &tokio_postgres::Client, token: u64) -> Result<(), baton_fence_sql::FenceError> {
//! use baton_fence_sql::{tokio_postgres::update, FenceError};
//!
//! match update("accounts", token)
//!     .set("balance", 110_i64)
//!     .filter("id", 42_i32)
//!     .execute(client)
//!     .await
//! {
//!     Ok(_rows) => {}
//!     Err(FenceError::StaleToken { .. }) => { /* a newer holder wrote: stop */ }
//!     Err(e) => return Err(e),
//! }
//! # Ok(())
//! # }
//! ```

use ::tokio_postgres::types::ToSql;
use ::tokio_postgres::GenericClient;

use crate::plan::{self, Dialect, Piece};
use crate::{FenceError, FencedUpdate};

/// A value to bind.
pub type Value = Box<dyn ToSql + Send + Sync>;

/// A fenced update of `table` with `token`: add
/// [`set`](FencedUpdate::set) and [`filter`](FencedUpdate::filter)
/// columns, then [`execute`](FencedUpdate::execute) it.
pub fn update(table: &str, token: u64) -> FencedUpdate<Value> {
    FencedUpdate::new(table, token)
}

impl FencedUpdate<Value> {
    /// Sets `column` to `value`.
    pub fn set<T: ToSql + Send + Sync + 'static>(self, column: &str, value: T) -> Self {
        self.push_set(column, Box::new(value))
    }

    /// Writes only rows whose `column` equals `value` (filters are ANDed).
    pub fn filter<T: ToSql + Send + Sync + 'static>(self, column: &str, value: T) -> Self {
        self.push_filter(column, Box::new(value))
    }

    /// Runs the update on `client`: the rows written, or why none was.
    /// In a transaction, the caller commits.
    pub async fn execute(&self, client: &impl GenericClient) -> Result<u64, FenceError> {
        let valid = self.plan.validate(Dialect::Postgres)?;
        let token = self.plan.token.to_string();
        if let Some(catalog) = plan::catalog(&valid, Dialect::Postgres) {
            let params = self.params(&catalog, &token);
            let sql = plan::render(&catalog, Dialect::Postgres);
            let row = client.query_opt(sql.as_str(), &params).await?;
            let declared: Option<String> = match row {
                Some(row) => row.try_get(0)?,
                None => None,
            };
            plan::check_declared(&valid, declared.as_deref())?;
        }
        let statements = plan::statements(&valid, Dialect::Postgres);
        let params = self.params(&statements.update, &token);
        let sql = plan::render(&statements.update, Dialect::Postgres);
        let updated = client.execute(sql.as_str(), &params).await?;
        if updated > 0 {
            return Ok(updated);
        }
        let params = self.params(&statements.probe, &token);
        let sql = plan::render(&statements.probe, Dialect::Postgres);
        let row = client.query_one(sql.as_str(), &params).await?;
        let count: Option<String> = row.try_get(0)?;
        let highest: Option<String> = row.try_get(1)?;
        plan::verdict(&valid, count.as_deref(), highest.as_deref())
    }

    /// The parameters of `pieces`, in placeholder order.
    fn params<'a>(&'a self, pieces: &'a [Piece], token: &'a String) -> Vec<&'a (dyn ToSql + Sync)> {
        pieces
            .iter()
            .filter(|piece| !matches!(piece, Piece::Sql(_)))
            .map(|piece| match (piece, self.value(piece)) {
                (Piece::Text(text), _) => text as &(dyn ToSql + Sync),
                (_, Some((_, value))) => value.as_ref() as &(dyn ToSql + Sync),
                (_, None) => token as &(dyn ToSql + Sync),
            })
            .collect()
    }
}
