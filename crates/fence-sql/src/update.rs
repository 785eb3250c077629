//! The builder the drivers share: a [`Plan`] and the values it binds.

use crate::plan::Piece;
use crate::{Plan, TokenColumn};

/// A fenced update being built: a [`Plan`] and its values, of type `V`
/// (each driver has its own; start from `sqlx::update` or
/// `tokio_postgres::update`).
pub struct FencedUpdate<V> {
    pub(crate) plan: Plan,
    sets: Vec<V>,
    filters: Vec<V>,
}

impl<V> std::fmt::Debug for FencedUpdate<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedUpdate")
            .field("plan", &self.plan)
            .finish_non_exhaustive()
    }
}

impl<V> FencedUpdate<V> {
    pub(crate) fn new(table: &str, token: u64) -> FencedUpdate<V> {
        FencedUpdate {
            plan: Plan::new(table, token),
            sets: Vec::new(),
            filters: Vec::new(),
        }
    }

    pub(crate) fn push_set(mut self, column: &str, value: V) -> Self {
        self.plan.sets.push(column.to_owned());
        self.sets.push(value);
        self
    }

    pub(crate) fn push_filter(mut self, column: &str, value: V) -> Self {
        self.plan.filters.push(column.to_owned());
        self.filters.push(value);
        self
    }

    /// The fence column's name (default [`crate::DEFAULT_FENCE_COLUMN`]).
    pub fn fence_column(mut self, name: &str) -> Self {
        self.plan.fence_column = name.to_owned();
        self
    }

    /// What the fence column is declared as (default
    /// [`TokenColumn::Declared`]: read from the catalog when a token is
    /// above 2^63-1): tokens above its limit are refused.
    pub fn token_column(mut self, column: TokenColumn) -> Self {
        self.plan.column = column;
        self
    }

    /// `false`: each grant writes at most once (`fence < token`) instead
    /// of as often as it likes (`fence <= token`, the default).
    pub fn reentrant(mut self, reentrant: bool) -> Self {
        self.plan.reentrant = reentrant;
        self
    }

    /// The update, driver aside.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The value bound at `piece`: a set or filter value, or `None` for
    /// the token and SQL text.
    pub(crate) fn value(&self, piece: &Piece) -> Option<(&str, &V)> {
        match *piece {
            Piece::Set(i) => Some((&self.plan.sets[i], &self.sets[i])),
            Piece::Filter(i) => Some((&self.plan.filters[i], &self.filters[i])),
            Piece::Sql(_) | Piece::Token | Piece::Text(_) => None,
        }
    }
}
