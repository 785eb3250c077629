//! The shell's one loop: it feeds the Raft node (openraft's metrics, the
//! outcome of each command, the time) and runs the node's commands
//! against openraft, until the core stops. Nothing is decided here; every
//! decision is the node's, tested without I/O.
//!
//! The loop copies the metrics before it takes the server's lock, so no
//! guard of openraft's watches is ever held under it, and the node takes
//! the role from the server metrics, so the full metrics, published a
//! step later, can lag without harm (see `node::observe`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use baton_server::SharedLocks;
use futures_util::stream::{FuturesUnordered, StreamExt};
use openraft::async_runtime::WatchReceiver;
use openraft::errors::Fatal;
use openraft::{Instant as _, TokioInstant};

use super::hold_timer::{HoldClock, HoldTimer};
use crate::raft::members::Members;
use crate::raft::node::lock_node::RaftLockNode;
use crate::raft::node::observe::{Metrics, SaturatingSince, ServerMetrics};
use crate::raft::node::reads::READ_WAIT;
use crate::raft::node::RaftCommand;
use crate::raft::storage::state_machine::TableHost;
use crate::raft::types::{LogId, NodeId, Raft, RaftOf};
use tokio::sync::watch;

type Shared = Arc<SharedLocks<RaftLockNode>>;

/// A command under way, with what the node hears when it ends.
type Running = Pin<Box<dyn Future<Output = Done> + Send>>;

/// How a command under way ended.
enum Done {
    Written {
        tags: Vec<u64>,
        took: Duration,
        result: Result<(), Option<NodeId>>,
    },
    Confirmed(bool),
    Heard(Option<Duration>),
    /// Nothing to tell the node (a hand-over, logged; a core that is gone).
    Quiet,
}

/// What woke the loop.
enum Wake {
    /// The node has commands, or may make some at its next turn.
    Output,
    /// The server metrics changed, or the node's timeout passed.
    Metrics,
    HoldOver,
    Done(Done),
}

/// Feeds the node and runs its commands until the node's tasks stop. Once
/// openraft's core is gone its metrics no longer change, but the loop
/// goes on: the proposals it still makes fail at once, and the node
/// answers their requests `M`. `removal` brings a member's word that
/// this node is none.
pub async fn run(
    raft: Raft,
    locks: Shared,
    hold_clock: HoldClock,
    mut removal: watch::Receiver<Option<LogId>>,
) {
    let mut server = raft.server_metrics();
    let full = raft.metrics();
    let timer = HoldTimer::new(hold_clock);
    let mut running: FuturesUnordered<Running> = FuturesUnordered::new();
    let mut hold: Option<Pin<Box<dyn Future<Output = ()> + Send + '_>>> = None;
    let mut wake = Wake::Metrics;
    let mut core_alive = true;
    loop {
        let at = TokioInstant::now();
        // Copies, so that no guard of a watch is held under the lock.
        let metrics = matches!(wake, Wake::Metrics).then(|| {
            let server = server.borrow_and_update().clone();
            (server, full.borrow_watched().clone())
        });
        let told_removed = *removal.borrow_and_update();
        let (commands, timeout) = feed(&locks, wake, metrics, told_removed, at);
        for command in commands {
            match command {
                RaftCommand::HoldProposal { at_most } => {
                    hold = Some(Box::pin(timer.sleep(at_most)))
                }
                RaftCommand::Propose { .. } => {
                    hold = None;
                    running.push(execute(&raft, command));
                }
                command => running.push(execute(&raft, command)),
            }
        }
        let sleep = async {
            match timeout {
                Some(due) => tokio::time::sleep(due.saturating_duration_since(at)).await,
                None => std::future::pending().await,
            }
        };
        wake = tokio::select! {
            () = locks.output_ready() => Wake::Output,
            changed = server.changed(), if core_alive => match changed {
                Ok(()) => Wake::Metrics,
                Err(_) => {
                    core_alive = false;
                    Wake::Output
                }
            },
            () = sleep => Wake::Metrics,
            Ok(()) = removal.changed() => Wake::Metrics,
            () = async {
                if let Some(hold) = hold.as_mut() {
                    hold.await;
                }
            }, if hold.is_some() => Wake::HoldOver,
            Some(done) = running.next(), if !running.is_empty() => Wake::Done(done),
        };
        if matches!(wake, Wake::HoldOver) {
            hold = None;
        }
    }
}

/// Feeds the node what woke the loop, and the metrics if they are due,
/// under the server's mutex; its commands and its timeout come back.
fn feed(
    locks: &Shared,
    wake: Wake,
    metrics: Option<(ServerMetrics, Metrics)>,
    told_removed: Option<LogId>,
    at: TokioInstant,
) -> (Vec<RaftCommand>, Option<TokioInstant>) {
    locks.with(|node, now, events| {
        match wake {
            Wake::Done(done) => hear(node, done, at, now, events),
            Wake::HoldOver => node.handle_hold_over(),
            Wake::Output | Wake::Metrics => {}
        }
        if let Some((server, full)) = &metrics {
            node.handle_removal_notice(told_removed);
            node.handle_metrics(server, full, at, now, events);
        }
        node.handle_tick(at);
        (node.take_commands(), node.poll_timeout())
    })
}

/// Tells the node how a command ended.
fn hear(
    node: &mut RaftLockNode,
    done: Done,
    at: TokioInstant,
    now: baton_core::Millis,
    events: &mut Vec<baton_server::NodeEvent>,
) {
    match done {
        Done::Written { tags, took, result } => {
            node.handle_proposal_done(&tags, took, result, at, now, events)
        }
        Done::Confirmed(confirmed) => node.handle_read_confirmed(confirmed, at, now, events),
        Done::Heard(age) => node.handle_leader_heard(age, now),
        Done::Quiet => {}
    }
}

/// Runs one command against openraft (a hold is the loop's own).
fn execute(raft: &Raft, command: RaftCommand) -> Running {
    let raft = raft.clone();
    match command {
        RaftCommand::Propose { proposal, tags } => Box::pin(async move {
            let proposed_at = TokioInstant::now();
            let written = raft.client_write(proposal).await;
            let result = written.map(drop).map_err(|error| {
                tracing::debug!(%error, "a proposal did not make it into the log");
                error.forward_to_leader().and_then(|f| f.leader_id)
            });
            let took = proposed_at.elapsed();
            Done::Written { tags, took, result }
        }),
        RaftCommand::ConfirmLead => Box::pin(async move {
            let confirmed = tokio::time::timeout(
                READ_WAIT,
                raft.ensure_linearizable(openraft::ReadPolicy::ReadIndex),
            )
            .await;
            let confirmed = matches!(confirmed, Ok(Ok(_)));
            if !confirmed {
                tracing::debug!("a read was not confirmed; redirecting");
            }
            Done::Confirmed(confirmed)
        }),
        RaftCommand::TransferLead { to, stuck } => Box::pin(async move {
            let members = raft.metrics().borrow_watched().membership_config.clone();
            let members = Members::of(members.membership());
            tracing::warn!(
                follower = members.name_of(stuck.node),
                matched = ?stuck.matched,
                lag = stuck.lag,
                to = members.name_of(to),
                "replication to a live follower is stuck; handing the lead over to rebuild it"
            );
            if let Err(error) = raft.trigger().transfer_leader(to).await {
                tracing::warn!(%error, "could not hand over the lead");
            }
            Done::Quiet
        }),
        RaftCommand::AskLeaderContact => Box::pin(async move {
            let touched = raft
                .with_raft_state(|state| state.vote_last_modified())
                .await;
            let Ok(touched) = touched else {
                return Done::Quiet;
            };
            let now = TokioInstant::now();
            Done::Heard(touched.map(|t| if now > t { now - t } else { Duration::ZERO }))
        }),
        RaftCommand::HoldProposal { .. } => Box::pin(async { Done::Quiet }),
    }
}

/// Resolves when the consensus core stops for any reason but a requested
/// shutdown, with the reason: a storage error (disk full, a file that can
/// no longer be written) or a panic. Such a node can neither lead nor
/// follow, so it should exit and be restarted.
///
/// openraft records why it stopped in its full metrics just before the
/// core goes, which closes every metrics channel; this waits on the
/// server metrics, which change only with the role, so that it is not
/// woken at every step of the core.
pub async fn core_died<H: TableHost>(raft: RaftOf<H>) -> String {
    let mut server = raft.server_metrics();
    let all = raft.metrics();
    while server.changed().await.is_ok() {}
    let state = all.borrow_watched().running_state.clone();
    match state {
        Err(Fatal::Stopped) => std::future::pending().await,
        Err(fatal) => fatal.to_string(),
        Ok(()) => {
            "the Raft core task ended unexpectedly (a panic: see the message before this one)"
                .to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An overflowing term, straight at openraft (no link, no bounds): a
    /// granted vote of term 2^64 - 1, then an election, whose next term
    /// overflows. The core panics (debug builds check the overflow); what
    /// matters here is that the death is seen, so that batond exits
    /// (`core_died` is what its main loop waits on).
    #[tokio::test]
    async fn a_panic_of_the_consensus_core_is_seen() {
        use crate::raft::test_host;
        let dir = tempfile::tempdir().expect("dir");
        let peers = vec!["n0:1".to_string(), "n1:1".to_string()];
        let settings = test_host::settings(0, &peers, dir.path());
        let (raft, _host) = test_host::node(&settings).await;
        let vote = openraft::impls::Vote {
            leader_id: openraft::impls::leader_id_adv::LeaderId {
                term: u64::MAX,
                node_id: 1,
            },
            committed: false,
        };
        let request = openraft::raft::VoteRequest {
            vote,
            last_log_id: Some(openraft::LogId::new(vote.leader_id, 1_000)),
            leadership_transfer: false,
        };
        let granted = raft.vote(request).await.expect("answered");
        assert!(granted.vote_granted, "{granted:?}");
        let died = core_died(raft.clone());
        let _ = raft.trigger().elect(false).await;
        let reason = tokio::time::timeout(Duration::from_secs(10), died)
            .await
            .expect("the dead core is seen");
        assert!(!reason.is_empty());
        println!("core died: {reason}");
    }
}
