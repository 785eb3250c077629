//! A scripted Baton node for the client-behaviour suite.
//!
//! It plays one scenario file (tests/client-behaviour/*.scn): it starts the
//! scenario's nodes on loopback ports, tells the client's adapter what to do
//! (`do <id> <action> ...` on stdout), checks the lines the client sends,
//! answers as the script says, checks what the adapter reports back
//! (`done <id> <outcome>` on stdin), and ends with `verdict pass`,
//! `verdict fail <why>` or `verdict skip <why>`. The format and the
//! adapter's side are in tests/client-behaviour/README.md; the behaviour
//! each scenario checks is in docs/clients.md.

mod net;
mod parse_step;
mod pattern;
mod player;
mod script;
mod steps;

use std::path::Path;

pub use pattern::{expand, matches};
pub use player::Player;
pub use script::{Scenario, ScriptError};
pub use steps::Verdict;

/// Exit statuses of `script-node`.
pub mod exit {
    pub const PASS: i32 = 0;
    pub const FAIL: i32 = 1;
    pub const SKIP: i32 = 2;
    /// The scenario file is unreadable or breaks the format.
    pub const BAD_SCENARIO: i32 = 3;
}

/// Plays the scenario at `path` against the adapter on stdin/stdout and
/// returns the exit status.
pub async fn run(path: &Path) -> i32 {
    let scenario = match Scenario::load(path) {
        Ok(scenario) => scenario,
        Err(e) => {
            println!("verdict fail bad scenario: {e}");
            return exit::BAD_SCENARIO;
        }
    };
    let dir = std::env::temp_dir().join(format!("script-node-{}", std::process::id()));
    let verdict = play(scenario, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    let (line, status) = match verdict {
        Verdict::Pass => ("verdict pass".to_owned(), exit::PASS),
        Verdict::Fail(why) => (format!("verdict fail {}", one_line(&why)), exit::FAIL),
        Verdict::Skip(why) => (format!("verdict skip {}", one_line(&why)), exit::SKIP),
    };
    eprintln!("{line}");
    println!("{line}");
    status
}

async fn play(scenario: Scenario, dir: &Path) -> Verdict {
    let tls = if scenario.nodes.iter().any(|n| n.tls) {
        let made = std::fs::create_dir_all(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))
            .and_then(|()| net::TlsMaterial::make(dir));
        match made {
            Ok(tls) => Some(tls),
            Err(why) => return Verdict::Fail(format!("TLS set-up: {why}")),
        }
    } else {
        None
    };
    eprintln!("scenario {}: {}", scenario.name, scenario.checks);
    let mut player = match Player::start(scenario, tls).await {
        Ok(player) => player,
        Err(why) => return Verdict::Fail(why),
    };
    player.read_adapter();
    player.play().await
}

fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}
