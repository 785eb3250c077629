//! The fenced chaos mode's resource: a real PostgreSQL table with one row
//! per chaos key, written by every grant's holder through baton-fence-sql
//! (tokio-postgres, a `numeric(20)` fence), late writes of holders whose
//! lease lapsed included. A trigger logs every change of a row's fence, so
//! that the check sees each one, not samples: no row may ever take a lower
//! fence than it had.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_fence_sql::{tokio_postgres::update, FenceError, TokenColumn};
use baton_tests::chaos::worker::{FencedResource, KEYS, RW_KEY};
use baton_tests::databases::DbServer;
use tokio::task::JoinHandle;

/// How long the late writes still pending at the end may take.
const LATE_BOUND: Duration = Duration::from_secs(20);

const SCHEMA: &str = "
CREATE TABLE chaos_fence (k text PRIMARY KEY, writer integer NOT NULL DEFAULT -1,
                          fence numeric(20) NOT NULL DEFAULT 0);
CREATE TABLE chaos_fence_log (k text NOT NULL, old numeric(20) NOT NULL, new numeric(20) NOT NULL);
CREATE FUNCTION chaos_fence_logged() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.fence <> OLD.fence THEN
    INSERT INTO chaos_fence_log VALUES (OLD.k, OLD.fence, NEW.fence);
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER chaos_fence_logged AFTER UPDATE ON chaos_fence
  FOR EACH ROW EXECUTE FUNCTION chaos_fence_logged();
";

/// What the writes came to.
#[derive(Debug, Default)]
struct Outcomes {
    /// Admitted writes: the highest token per key.
    highest: BTreeMap<String, u64>,
    admitted: usize,
    stale: usize,
    late_admitted: usize,
    late_stale: usize,
    /// Anything else: the database is never disturbed, so each is a bug.
    failures: Vec<String>,
}

/// The table, its client, and what the writes came to.
#[derive(Debug)]
pub struct PgFencedTable {
    client: Arc<tokio_postgres::Client>,
    outcomes: Arc<Mutex<Outcomes>>,
    late: Mutex<Vec<JoinHandle<()>>>,
    _server: DbServer,
}

impl PgFencedTable {
    /// Connects to `server` and makes the table, a row per chaos key.
    pub async fn new(server: DbServer) -> PgFencedTable {
        let (client, connection) =
            tokio_postgres::connect(&server.postgres_url(), tokio_postgres::NoTls)
                .await
                .unwrap_or_else(|e| panic!("connect to PostgreSQL: {e}\n{}", server.log_tail()));
        tokio::spawn(connection);
        client.batch_execute(SCHEMA).await.expect("the schema");
        let own = (0..8).map(|w| format!("chaos/w{w}"));
        for key in KEYS
            .iter()
            .chain([&RW_KEY])
            .map(|k| k.to_string())
            .chain(own)
        {
            let insert = "INSERT INTO chaos_fence (k) VALUES ($1)";
            client.execute(insert, &[&key]).await.expect("a row");
        }
        PgFencedTable {
            client: Arc::new(client),
            outcomes: Arc::default(),
            late: Mutex::default(),
            _server: server,
        }
    }

    /// Waits for the late writes, then checks the log: writes happened,
    /// no fence ever went down, each row ends at its highest admitted token.
    /// A one-line summary.
    pub async fn check(&self) -> String {
        let late: Vec<_> = self.late.lock().expect("late").drain(..).collect();
        for task in late {
            let done = tokio::time::timeout(LATE_BOUND, task).await;
            assert!(
                matches!(done, Ok(Ok(()))),
                "a late write did not finish: {done:?}"
            );
        }
        let log = "SELECT k, old::text, new::text FROM chaos_fence_log";
        let rows = self.client.query(log, &[]).await.expect("the log");
        let lowered: Vec<String> = rows
            .iter()
            .filter(|r| parse(r.get(2)) < parse(r.get(1)))
            .map(|r| {
                format!(
                    "{}: {} -> {}",
                    r.get::<_, String>(0),
                    r.get::<_, String>(1),
                    r.get::<_, String>(2)
                )
            })
            .collect();
        assert!(lowered.is_empty(), "fences went down: {lowered:?}");
        let finals = "SELECT k, fence::text FROM chaos_fence";
        let finals = self.client.query(finals, &[]).await.expect("the rows");
        let outcomes = self.outcomes.lock().expect("outcomes");
        assert!(
            outcomes.failures.is_empty(),
            "fenced writes failed: {:?}",
            outcomes.failures
        );
        assert!(
            outcomes.admitted > 0 && !rows.is_empty(),
            "no fenced write happened: {outcomes:?}"
        );
        for row in finals {
            let key: String = row.get(0);
            let fence = parse(row.get(1));
            let highest = outcomes.highest.get(&key).copied().unwrap_or(0);
            assert_eq!(
                fence, highest,
                "{key} ends at {fence}, its highest admitted token is {highest}"
            );
        }
        format!(
            "fenced writes: {} admitted, {} refused as stale; late writes (lease lapsed): {} admitted, {} refused; {} fence changes logged, none down",
            outcomes.admitted, outcomes.stale, outcomes.late_admitted, outcomes.late_stale, rows.len()
        )
    }
}

fn parse(text: String) -> u64 {
    text.parse()
        .unwrap_or_else(|e| panic!("fence {text:?}: {e}"))
}

/// One fenced write, recorded in `outcomes`.
async fn write(
    client: &tokio_postgres::Client,
    outcomes: &Mutex<Outcomes>,
    key: &str,
    worker: usize,
    token: u64,
    late: bool,
) {
    let written = update("chaos_fence", token)
        .set("writer", worker as i32)
        .filter("k", key.to_owned())
        .token_column(TokenColumn::Unsigned)
        .execute(client)
        .await;
    let mut outcomes = outcomes.lock().expect("outcomes");
    match written {
        Ok(_) => {
            let highest = outcomes.highest.entry(key.to_owned()).or_default();
            *highest = (*highest).max(token);
            if late {
                outcomes.late_admitted += 1;
            } else {
                outcomes.admitted += 1;
            }
        }
        Err(FenceError::StaleToken { highest, .. }) if highest > token => {
            if late {
                outcomes.late_stale += 1;
            } else {
                outcomes.stale += 1;
            }
        }
        Err(e) => outcomes.failures.push(format!("{key} {token}: {e}")),
    }
}

impl FencedResource for PgFencedTable {
    fn write(
        &self,
        key: &str,
        worker: usize,
        token: u64,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        let key = key.to_owned();
        Box::pin(
            async move { write(&self.client, &self.outcomes, &key, worker, token, false).await },
        )
    }

    fn write_late(&self, key: &str, worker: usize, token: u64, after: Duration) {
        let (client, outcomes, key) = (
            Arc::clone(&self.client),
            Arc::clone(&self.outcomes),
            key.to_owned(),
        );
        let task = tokio::spawn(async move {
            tokio::time::sleep(after).await;
            write(&client, &outcomes, &key, worker, token, true).await;
        });
        self.late.lock().expect("late").push(task);
    }
}
