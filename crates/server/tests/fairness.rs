//! A connection flooded with pipelined requests takes turns with the
//! node's other tasks: on one thread, another client's request is served
//! in the middle of a burst, not after all of it.

mod memory;

use memory::token;

use baton_server::ServerConfig;
use tokio::io::AsyncWriteExt;

/// Requests in the burst: all fit in the in-memory pipe at once (58 KB),
/// so the flooded connection always has more to read.
const BURST: usize = 4_500;

#[tokio::test]
async fn a_burst_of_pipelined_requests_lets_another_client_in() {
    let (dial, _stop, _server) = memory::start(ServerConfig::default());
    let mut flood = dial.connect().await;
    let mut probe = dial.connect().await;
    // Both connections are open and served before the burst.
    let first = token(&flood.ask("A warm 0 10").await);
    assert!(token(&probe.ask("A probe-warm 0 10").await) > first);
    let burst: String = (0..BURST).map(|i| format!("A k{i} 0 10\n")).collect();
    flood
        .0
        .get_mut()
        .write_all(burst.as_bytes())
        .await
        .expect("write");
    probe.send("A probe 0 10").await;
    let probe_token = token(&probe.line().await);
    let mut last = 0;
    for _ in 0..BURST {
        last = token(&flood.line().await);
    }
    // Tokens rise from grant to grant: the probe's falls inside the
    // burst's.
    assert!(
        probe_token < last,
        "the probe ({probe_token}) waited for the whole burst (last {last})"
    );
}
