//! The AppendEntries requests to one follower, as openraft streams them
//! ([`RaftNetworkV2::stream_append`](openraft::network::RaftNetworkV2)),
//! sent one at a time like openraft's default, with one change: a request
//! without entries waits a little for the next one.
//!
//! Why: once an entry commits, openraft tells each follower the new commit
//! index at once, in a request of its own with no entries, unless new
//! entries are ready to carry it. At one client that is every commit: the
//! client's next command arrives a round trip later. So every commit cost
//! two round trips of frames to each follower, each a wake-up of three
//! processes on a shared core (docs/benchmarks.md counts them). Nobody waits for that second round trip: the leader answers
//! its client on commit, and a follower only applies sooner.
//!
//! The rule: an entry-less request is held for at most [`HOLD_EMPTY`].
//! If the next request starts where it does (the same `prev_log_id`, the
//! same vote, a commit index at least as high), the held one is dropped
//! and the next one carries everything it said. openraft counts an answer
//! by the highest entry it acknowledges (its in-flight queue drains every
//! request ending at or below it), so the one answer acknowledges both,
//! truthfully: the follower did receive a request that starts there. A
//! next request that starts elsewhere (a probe after a conflict) lets the
//! held one go first, unchanged. Requests with entries are never held.

use std::time::Duration;

use futures_util::stream::{Fuse, StreamExt};
use futures_util::Stream;
use openraft::base::{BoxFuture, BoxStream};
use openraft::errors::RPCError;
use openraft::network::{RPCOption, RaftNetworkV2};
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, StreamAppendResult};
use openraft::OptionalSend;

use crate::raft::net::bounds::Implausible;
use crate::raft::net::network::PeerClient;
use crate::raft::types::TypeConfig;

/// How long an entry-less request waits for a request to ride on: several
/// cycles of a client on this machine (a commit is 0.2-0.8 ms), far below
/// a heartbeat (50 ms), which carries the commit index anyway.
pub const HOLD_EMPTY: Duration = Duration::from_millis(2);

type Request = AppendEntriesRequest<TypeConfig>;

/// openraft's request stream, with the one request that came while an
/// entry-less one was held and cannot replace it.
pub struct Feed<S: Stream<Item = Request> + Unpin> {
    input: Fuse<S>,
    next: Option<Request>,
    hold: Duration,
}

impl<S: Stream<Item = Request> + Unpin> Feed<S> {
    pub fn new(input: S, hold: Duration) -> Feed<S> {
        Feed {
            input: input.fuse(),
            next: None,
            hold,
        }
    }

    /// The next request to send, None once openraft's stream ended and
    /// everything from it was handed out.
    pub async fn next_to_send(&mut self) -> Option<Request> {
        let mut request = match self.next.take() {
            Some(request) => request,
            None => self.input.next().await?,
        };
        if !request.entries.is_empty() {
            return Some(request);
        }
        let until = tokio::time::Instant::now() + self.hold;
        loop {
            let next = match tokio::time::timeout_at(until, self.input.next()).await {
                Ok(Some(next)) => next,
                // Held long enough, or the stream ended: it goes alone.
                Ok(None) | Err(_) => return Some(request),
            };
            if !carries(&next, &request) {
                self.next = Some(next);
                return Some(request);
            }
            request = next;
            if !request.entries.is_empty() {
                return Some(request);
            }
        }
    }
}

type Answers<'s> = BoxStream<'s, Result<StreamAppendResult<TypeConfig>, RPCError<TypeConfig>>>;

/// `input`'s requests sent to `client`'s peer one at a time, through a
/// [`Feed`], each answer turned into what openraft's stream expects. The
/// stream ends after an error, a conflict, a higher vote, or a partial
/// success short of what was sent (openraft then starts a new one), as
/// openraft's default does.
pub fn send_all<'s, S>(
    client: &'s mut PeerClient,
    input: S,
    option: RPCOption,
) -> BoxFuture<'s, Result<Answers<'s>, RPCError<TypeConfig>>>
where
    S: Stream<Item = Request> + OptionalSend + Unpin + 'static,
{
    let answers =
        futures_util::stream::unfold(Some((client, Feed::new(input, HOLD_EMPTY))), move |state| {
            let option = option.clone();
            async move {
                let (client, mut feed) = state?;
                let request = feed.next_to_send().await?;
                match send(client, request, option).await {
                    Ok((answer, go_on)) => Some((Ok(answer), go_on.then_some((client, feed)))),
                    Err(error) => Some((Err(error), None)),
                }
            }
        });
    Box::pin(async move { Ok(Box::pin(answers) as Answers<'s>) })
}

/// Sends one request: its answer for openraft, and whether the stream
/// goes on after it.
async fn send(
    client: &mut PeerClient,
    request: Request,
    option: RPCOption,
) -> Result<(StreamAppendResult<TypeConfig>, bool), RPCError<TypeConfig>> {
    let prev = request.prev_log_id;
    let last = request.entries.last().map(|entry| entry.log_id).or(prev);
    let response = client.append_entries(request, option).await?;
    let go_on = match &response {
        AppendEntriesResponse::Success => true,
        AppendEntriesResponse::PartialSuccess(upto) => *upto == last,
        AppendEntriesResponse::Conflict | AppendEntriesResponse::HigherVote(_) => false,
    };
    // A conflict before the first entry is no answer (openraft would
    // panic on it).
    if response.is_conflict() && prev.is_none() {
        return Err(client.implausible("append reply", Implausible::Reply));
    }
    Ok((response.into_stream_result(prev, last), go_on))
}

/// Whether `next` says all that the entry-less `held` says: it starts at
/// the same place, for the same leader, with a commit index as high.
fn carries(next: &Request, held: &Request) -> bool {
    debug_assert!(held.entries.is_empty(), "held a request with entries");
    next.vote == held.vote
        && next.prev_log_id == held.prev_log_id
        && next.leader_commit >= held.leader_commit
}

#[cfg(test)]
#[path = "append_stream_tests.rs"]
mod tests;
