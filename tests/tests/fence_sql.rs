//! baton-fence-sql against the real servers, with real `batond`: Kleppmann's
//! scenario ("How to do distributed locking") through each driver — client
//! A acquires with a 1 s lease and pauses 1.5 s; B acquires and writes; A
//! wakes and writes with its token and is refused — and the limits of each
//! fence column type (signed 64-bit refuses 2^63, unsigned holds every
//! token, nothing clamped or wrapped).
//!
//! PostgreSQL and MariaDB come from Debian's packages (`.ci/run` installs
//! them); without them the tests say so and pass locally, and fail in CI.

use std::sync::Arc;
use std::time::Duration;

use baton_client::Client;
use baton_fence_sql::{sqlx::update, tokio_postgres as tpg, Dialect, FenceError, TokenColumn};
use baton_tests::databases::DbServer;
use baton_tests::Batond;
use sqlx::{MySqlPool, PgPool, SqlitePool};

/// One driver's connection, and the few calls the tests make through it.
enum Driver {
    SqlxPostgres(PgPool),
    TokioPostgres(Arc<tokio_postgres::Client>),
    SqlxMySql(MySqlPool),
    SqlxSqlite(SqlitePool),
}

impl Driver {
    fn name(&self) -> &'static str {
        match self {
            Driver::SqlxPostgres(_) => "sqlx-postgres",
            Driver::TokioPostgres(_) => "tokio-postgres",
            Driver::SqlxMySql(_) => "sqlx-mysql",
            Driver::SqlxSqlite(_) => "sqlx-sqlite",
        }
    }

    fn dialect(&self) -> Dialect {
        match self {
            Driver::SqlxPostgres(_) | Driver::TokioPostgres(_) => Dialect::Postgres,
            Driver::SqlxMySql(_) => Dialect::MySql,
            Driver::SqlxSqlite(_) => Dialect::Sqlite,
        }
    }

    /// The fence column types to declare: signed, and unsigned if any.
    fn columns(&self) -> (&'static str, Option<&'static str>) {
        match self.dialect() {
            Dialect::Postgres => ("bigint", Some("numeric(20)")),
            Dialect::MySql => ("BIGINT", Some("BIGINT UNSIGNED")),
            Dialect::Sqlite => ("INTEGER", None),
        }
    }

    async fn sql(&self, sql: &str) {
        let done = match self {
            Driver::SqlxPostgres(pool) => sqlx::query(sql).execute(pool).await.map(drop),
            Driver::SqlxMySql(pool) => sqlx::query(sql).execute(pool).await.map(drop),
            Driver::SqlxSqlite(pool) => sqlx::query(sql).execute(pool).await.map(drop),
            Driver::TokioPostgres(client) => {
                let done = client.batch_execute(sql).await;
                return done.unwrap_or_else(|e| panic!("{sql}: {e}"));
            }
        };
        done.unwrap_or_else(|e| panic!("{}: {sql}: {e}", self.name()));
    }

    /// A fresh table with row 1 (fence 0) whose fence is `column`.
    async fn table(&self, column: &str) -> String {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let table = format!(
            "fenced_{}_{}_{n}",
            self.name().replace('-', "_"),
            std::process::id()
        );
        self.sql(&format!(
            "CREATE TABLE {table} (id INTEGER PRIMARY KEY, v VARCHAR(40), fence {column} NOT NULL DEFAULT 0)"
        ))
        .await;
        self.sql(&format!("INSERT INTO {table} (id, v) VALUES (1, 'start')"))
            .await;
        table
    }

    /// The fenced write of `v` into row 1 of `table`.
    async fn write(
        &self,
        table: &str,
        token: u64,
        v: &str,
        column: TokenColumn,
    ) -> Result<u64, FenceError> {
        let v = v.to_owned();
        match self {
            Driver::SqlxPostgres(pool) => {
                let mut conn = pool.acquire().await?;
                let update = update::<sqlx::Postgres>(table, token)
                    .set("v", v)
                    .filter("id", 1_i32);
                update.token_column(column).execute(&mut conn).await
            }
            Driver::SqlxMySql(pool) => {
                let mut conn = pool.acquire().await?;
                let update = update::<sqlx::MySql>(table, token)
                    .set("v", v)
                    .filter("id", 1_i32);
                update.token_column(column).execute(&mut conn).await
            }
            Driver::SqlxSqlite(pool) => {
                let mut conn = pool.acquire().await?;
                let update = update::<sqlx::Sqlite>(table, token)
                    .set("v", v)
                    .filter("id", 1_i32);
                update.token_column(column).execute(&mut conn).await
            }
            Driver::TokioPostgres(client) => {
                let update = tpg::update(table, token).set("v", v).filter("id", 1_i32);
                update.token_column(column).execute(client.as_ref()).await
            }
        }
    }

    /// Row 1 of `table`: its value and its fence.
    async fn row(&self, table: &str) -> (String, u64) {
        let text = match self.dialect() {
            Dialect::MySql => "CHAR",
            _ => "TEXT",
        };
        let sql = format!("SELECT v, CAST(fence AS {text}) FROM {table} WHERE id = 1");
        let (v, fence): (String, String) = match self {
            Driver::SqlxPostgres(pool) => sqlx::query_as(&sql).fetch_one(pool).await.expect("row"),
            Driver::SqlxMySql(pool) => sqlx::query_as(&sql).fetch_one(pool).await.expect("row"),
            Driver::SqlxSqlite(pool) => sqlx::query_as(&sql).fetch_one(pool).await.expect("row"),
            Driver::TokioPostgres(client) => {
                let row = client.query_one(sql.as_str(), &[]).await.expect("row");
                (row.get(0), row.get(1))
            }
        };
        (v, fence.trim().parse().expect("a fence"))
    }
}

async fn client(node: &Batond) -> Client {
    Client::builder()
        .servers([node.addr().to_string()])
        .build()
        .await
        .expect("client")
}

/// Kleppmann's scenario through `db`: B's write stays, A's is refused.
async fn scenario(node: &Batond, db: &Driver) {
    let table = db.table(db.columns().0).await;
    let key = format!("fence/{}", db.name());
    let (a, b) = (client(node).await, client(node).await);
    let lock_a = a
        .acquire(&key, Duration::from_secs(5), Duration::from_secs(1))
        .await
        .expect("A acquires");
    tokio::time::sleep(Duration::from_millis(1500)).await; // A's pause
    let lock_b = b
        .acquire(&key, Duration::from_secs(5), Duration::from_secs(30))
        .await
        .expect("B acquires once A's lease lapsed");
    let (token_a, token_b) = (lock_a.token(), lock_b.token());
    assert!(token_b > token_a);
    let signed = TokenColumn::Signed;
    let written = db.write(&table, token_b, "written by B", signed).await;
    assert_eq!(written.expect("B writes"), 1, "{}", db.name());
    let refused = db.write(&table, token_a, "written by A", signed).await;
    assert!(
        matches!(refused, Err(FenceError::StaleToken { token, highest }) if token == token_a && highest == token_b),
        "{}: A's stale write: {refused:?}",
        db.name()
    );
    assert_eq!(db.row(&table).await, ("written by B".to_owned(), token_b));
    lock_b.release().await.expect("B releases");
    drop(lock_a);
    a.close().await.expect("close");
    b.close().await.expect("close");
}

/// The rules and the column limits through `db`.
async fn rules_and_limits(db: &Driver) {
    let (signed, unsigned) = db.columns();
    let table = db.table(signed).await;
    let (s, u, d) = (
        TokenColumn::Signed,
        TokenColumn::Unsigned,
        TokenColumn::Declared,
    );
    let token = 1_u64 << 60;
    let name = db.name();
    assert_eq!(db.write(&table, token, "b", s).await.expect(name), 1);
    // The same holder, the same values: still its write, not a stale token.
    assert_eq!(db.write(&table, token, "b", s).await.expect(name), 1);
    let stale = db.write(&table, token - 1, "old", s).await;
    assert!(
        matches!(stale, Err(FenceError::StaleToken { .. })),
        "{name}: {stale:?}"
    );
    let high = i64::MAX as u64;
    // Told signed, or found so in the catalog (SQLite: signed anyway).
    for told in [s, d] {
        let wrapped = db.write(&table, high + 1, "wrapped", told).await;
        assert!(
            matches!(wrapped, Err(FenceError::TokenOutOfRange { .. })),
            "{name}: {wrapped:?}"
        );
    }
    assert_eq!(db.write(&table, high, "max", s).await.expect(name), 1);
    assert_eq!(db.row(&table).await, ("max".to_owned(), high));
    let missing = update_missing_row(db, &table).await;
    assert!(
        matches!(missing, Err(FenceError::NoRow { .. })),
        "{name}: {missing:?}"
    );
    let Some(unsigned) = unsigned else {
        let beyond = db.write(&table, high + 1, "beyond", u).await;
        assert!(
            matches!(beyond, Err(FenceError::TokenOutOfRange { .. })),
            "{name}: {beyond:?}"
        );
        return;
    };
    let table = db.table(unsigned).await;
    // Told signed: the caller's word stands.
    let told = db.write(&table, high + 5, "told", s).await;
    assert!(
        matches!(told, Err(FenceError::TokenOutOfRange { .. })),
        "{name}: {told:?}"
    );
    // Found unsigned in the catalog.
    assert_eq!(db.write(&table, high + 5, "high", d).await.expect(name), 1);
    let stale = db.write(&table, high + 4, "stale", u).await;
    assert!(
        matches!(stale, Err(FenceError::StaleToken { highest, .. }) if highest == high + 5),
        "{name}: {stale:?}"
    );
    assert_eq!(db.write(&table, u64::MAX, "top", u).await.expect(name), 1);
    let stale = db.write(&table, u64::MAX - 1, "stale", d).await;
    assert!(
        matches!(stale, Err(FenceError::StaleToken { .. })),
        "{name}: {stale:?}"
    );
    assert_eq!(db.row(&table).await, ("top".to_owned(), u64::MAX));
}

async fn update_missing_row(db: &Driver, table: &str) -> Result<u64, FenceError> {
    db.sql(&format!("DELETE FROM {table}")).await;
    db.write(table, 1 << 61, "none", TokenColumn::Signed).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_through_sqlx_and_tokio_postgres() {
    let Some(server) = DbServer::postgres() else {
        return;
    };
    let node = Batond::start(&[]);
    let pool = PgPool::connect(&server.postgres_url())
        .await
        .expect("sqlx connects");
    let (client, connection) =
        tokio_postgres::connect(&server.postgres_url(), tokio_postgres::NoTls)
            .await
            .expect("tokio-postgres connects");
    tokio::spawn(connection);
    for db in [
        Driver::SqlxPostgres(pool),
        Driver::TokioPostgres(Arc::new(client)),
    ] {
        scenario(&node, &db).await;
        rules_and_limits(&db).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_through_sqlx() {
    let Some(server) = DbServer::mariadb() else {
        return;
    };
    let node = Batond::start(&[]);
    let pool = MySqlPool::connect(&server.mysql_url())
        .await
        .expect("sqlx connects");
    let db = Driver::SqlxMySql(pool);
    scenario(&node, &db).await;
    rules_and_limits(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_through_sqlx() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("fence.db").display()
    );
    let node = Batond::start(&[]);
    let db = Driver::SqlxSqlite(SqlitePool::connect(&url).await.expect("sqlite"));
    scenario(&node, &db).await;
    rules_and_limits(&db).await;
}
