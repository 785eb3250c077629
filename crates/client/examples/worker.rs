//! A worker doing guarded work: it takes the lock of a job, keeps the lease
//! alive while working, stamps every write with its fencing token, and stops
//! at once if the lease is lost.
//!
//! Run a node (`batond`) and then several of these at once:
//!
//! ```text
//! cargo run -p baton-client --example worker -- 127.0.0.1:7411 jobs/nightly
//! ```

use std::time::Duration;

use baton_client::{Client, Error, Fence, Key};

/// The protected resource: only writes stamped with a current token pass.
/// A real one would be a database row updated with
/// `UPDATE ... SET fence = $token WHERE fence <= $token`.
struct Ledger {
    fence: Fence,
    entries: Vec<String>,
}

impl Ledger {
    fn append(&mut self, key: &Key, token: u64, entry: String) -> Result<(), String> {
        self.fence.admit(key, token).map_err(|e| e.to_string())?;
        self.entries.push(entry);
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let server = args.next().unwrap_or_else(|| "127.0.0.1:7411".to_owned());
    let job = args.next().unwrap_or_else(|| "jobs/nightly".to_owned());
    let key = Key::try_from(job.as_str())?;

    let client = Client::builder().servers([server]).build().await?;
    let mut ledger = Ledger {
        fence: Fence::new(key.clone()),
        entries: Vec::new(),
    };

    for round in 0..3 {
        let mut guard = match client
            .acquire(&job, Duration::from_secs(30), Duration::from_secs(10))
            .await
        {
            Ok(guard) => guard,
            Err(Error::TimedOut { .. }) => {
                eprintln!("round {round}: {job} stayed busy for 30 s; trying again");
                continue;
            }
            Err(err) => return Err(err.into()),
        };
        guard.keep_alive();
        let token = guard.token();
        println!("round {round}: holding {job} with token {token}");

        let work = async {
            for step in 0..5 {
                tokio::time::sleep(Duration::from_millis(200)).await;
                ledger.append(&key, token, format!("round {round} step {step}"))?;
            }
            Ok::<_, String>(())
        };
        tokio::select! {
            done = work => match done {
                Ok(()) => println!("round {round}: done"),
                Err(refused) => eprintln!("round {round}: write refused: {refused}"),
            },
            lost = guard.lost() => {
                eprintln!("round {round}: {lost}; stopping this round");
                continue;
            }
        }
        guard.release().await?;
    }
    println!("{} entries written", ledger.entries.len());
    // Releases whatever is still held (a round that stopped early dropped
    // its guard, which only starts a release) and waits for the answers:
    // returning from main without it would kill those releases.
    client.close().await?;
    Ok(())
}
