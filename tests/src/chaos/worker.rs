//! A chaos client: acquires, renews, releases and queries a few shared keys
//! against every node of the fleet, following `M` redirects, and records
//! every attempt (to which node, when sent, what came back, when) for the
//! history checker. It never panics on what a node says: judging is the
//! checker's job.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::time::timeout;

use crate::chaos::history::{Answer, Attempt, Kind, Outcome, Request};
use crate::chaos::rng::Rng;

/// The keys the workers fight over: few, so that waits and handovers happen.
/// Each worker also has a key of its own, `chaos/w<id>`: after releasing it,
/// nobody else can hold it, so a refusal of the next acquire shows that the
/// release was not applied.
pub const KEYS: [&str; 3] = ["chaos/a", "chaos/b", "chaos/c"];

/// The keys of protocol 1.2, in the modes that serve them: a semaphore
/// of [`POOL_PERMITS`] permits, and a readers-writer key whose acquires
/// are shared or exclusive at random.
pub const POOL_KEY: &str = "chaos/pool";
pub const RW_KEY: &str = "chaos/rw";
pub const POOL_PERMITS: u32 = 3;

/// Percent of rounds on the worker's own key.
const OWN_KEY_ROUNDS: u64 = 30;

/// Percent of requests that start at a random node.
const ANY_NODE_PERCENT: u64 = 20;

/// How long a connect may take before the node counts as unreachable
/// (nothing was sent, so nothing is recorded).
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// Pause before asking another node after `M ... -` or a failed connect.
const RETRY_PAUSE: Duration = Duration::from_millis(25);

/// A logical request (all its attempts) gives up after this long.
const REQUEST_BOUND: Duration = Duration::from_secs(8);

/// A protected resource the workers write to with each token they are
/// granted, which must check the fence: the fenced chaos mode's PostgreSQL
/// table. The run judges nothing here; the resource's owner checks it.
pub trait FencedResource: Send + Sync + std::fmt::Debug {
    /// One fenced write of `key` by `worker` with `token`; the outcome is
    /// the resource's to record.
    fn write(
        &self,
        key: &str,
        worker: usize,
        token: u64,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;

    /// The same, by a holder that walked away and wakes `after` its grant,
    /// its lease lapsed (Kleppmann's paused client); not waited for by the
    /// worker, so the resource keeps it and finishes it before checking.
    fn write_late(&self, key: &str, worker: usize, token: u64, after: Duration);
}

/// What a worker shares with the run.
#[derive(Debug, Clone)]
pub struct Shared {
    pub peers: Vec<SocketAddr>,
    pub start: Instant,
    /// Set at the end of the run: finish the current attempt and stop.
    pub stop: Arc<AtomicBool>,
    /// The node that answered the latest grant: the fault schedule aims at it.
    pub serving: Arc<AtomicUsize>,
    /// How long past the answer-time deadline an attempt is waited for.
    pub answer_slack: Duration,
    /// Whether the nodes answer `Q` (docs/protocol.md 1.1): then every
    /// acknowledged release is followed by a `Q` of its key.
    pub query: bool,
    /// Where each grant's holder writes with its token, if anywhere.
    pub fenced: Option<Arc<dyn FencedResource>>,
}

#[derive(Debug)]
struct Conn {
    node: usize,
    /// When it was opened, as an offset from the start of the run.
    opened: Duration,
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
}

/// One worker's state and its record.
#[derive(Debug)]
pub struct Worker {
    id: usize,
    shared: Shared,
    rng: Rng,
    own_key: String,
    target: usize,
    conn: Option<Conn>,
    attempts: Vec<Attempt>,
}

impl Worker {
    pub fn new(id: usize, shared: Shared, rng: Rng) -> Worker {
        let target = id % shared.peers.len();
        Worker {
            id,
            shared,
            rng,
            own_key: format!("chaos/w{id}"),
            target,
            conn: None,
            attempts: Vec::new(),
        }
    }

    fn stopping(&self) -> bool {
        self.shared.stop.load(Ordering::SeqCst)
    }

    /// Runs acquire / renew / release / query rounds until the run stops.
    pub async fn run(mut self) -> Vec<Attempt> {
        while !self.stopping() {
            self.round().await;
            let pace = self.rng.millis(0, 40);
            tokio::time::sleep(pace).await;
        }
        self.attempts
    }

    async fn round(&mut self) {
        let own = self.rng.chance(OWN_KEY_ROUNDS);
        let (key, kind) = if own {
            (self.own_key.clone(), Kind::Plain)
        } else {
            self.shared_key()
        };
        let key = key.as_str();
        let wait = self.rng.millis(50, 1500);
        let lease = self.rng.millis(300, 2500);
        let acquire = Request::Acquire { wait, lease, kind };
        let Some(Answer::Granted(token)) = self.request(key, acquire).await else {
            return;
        };
        // Only an exclusive grant may fence: a semaphore's or a shared
        // grant's fellow holders are live at once, all of them rightly.
        let fenced = self.shared.fenced.clone().filter(|_| kind == Kind::Plain);
        if let Some(fenced) = &fenced {
            fenced.write(key, self.id, token).await;
        }
        let renewals = self.rng.below(3);
        for _ in 0..renewals {
            tokio::time::sleep(lease / 3).await;
            if self.stopping() {
                return;
            }
            let renew = Request::Renew { token, lease };
            if self.request(key, renew).await != Some(Answer::Renewed) {
                return;
            }
        }
        // Now and then a holder of a shared key walks away and lets the
        // lease run out (and, fenced, writes again once it lapsed).
        if (!own && self.rng.chance(15)) || self.stopping() {
            if let Some(fenced) = fenced {
                let after = lease + self.rng.millis(50, 500);
                fenced.write_late(key, self.id, token, after);
            }
            return;
        }
        let hold = self.rng.millis(0, 200);
        tokio::time::sleep(hold).await;
        let released = self.request(key, Request::Release { token }).await;
        if released == Some(Answer::Released) && self.shared.query && kind == Kind::Plain {
            // Checked by the history: this must not show `token` again.
            self.request(key, Request::Query).await;
        }
        if released == Some(Answer::Released) && own {
            // Free for sure now: the history checks that it is granted.
            let probe = Request::Acquire {
                wait: self.rng.millis(50, 300),
                lease: self.rng.millis(300, 1000),
                kind: Kind::Plain,
            };
            if let Some(Answer::Granted(token)) = self.request(key, probe).await {
                self.request(key, Request::Release { token }).await;
            }
        }
    }

    /// A key the workers share, with the kind of grant to ask of it.
    fn shared_key(&mut self) -> (String, Kind) {
        // Every mode serves semaphores and shared locks (protocol 1.2).
        let choices = KEYS.len() as u64 + 2;
        match self.rng.below(choices) as usize {
            i if i < KEYS.len() => (KEYS[i].to_owned(), Kind::Plain),
            i if i == KEYS.len() => (POOL_KEY.to_owned(), Kind::Permit(POOL_PERMITS)),
            _ if self.rng.chance(60) => (RW_KEY.to_owned(), Kind::Shared),
            _ => (RW_KEY.to_owned(), Kind::Plain),
        }
    }

    /// Sends `request` until some node gives a verdict (anything but `M`),
    /// within [`REQUEST_BOUND`]; `None` when none came.
    async fn request(&mut self, key: &str, request: Request) -> Option<Answer> {
        // Now and then start at any node rather than the one that answered
        // last: a node that just came back (a deposed leader, a resumed
        // active) gets asked too.
        if self.rng.chance(ANY_NODE_PERCENT) {
            self.target = self.rng.below(self.shared.peers.len() as u64) as usize;
        }
        let started = Instant::now();
        while started.elapsed() < REQUEST_BOUND && !self.stopping() {
            let Some(answer) = self.attempt(key, &request).await else {
                // Not sent (no connection), or sent and lost: try the next node.
                self.target = (self.target + 1) % self.shared.peers.len();
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            };
            match answer {
                Answer::Moved(_) => {}
                Answer::Granted(_) => {
                    self.shared.serving.store(self.target, Ordering::Relaxed);
                    return Some(answer);
                }
                verdict => return Some(verdict),
            }
        }
        None
    }

    /// One attempt on the current target. Records it if it was sent; on `M`
    /// moves the target. `None` unless a line came back.
    async fn attempt(&mut self, key: &str, request: &Request) -> Option<Answer> {
        if self.conn.as_ref().is_none_or(|c| c.node != self.target) {
            let opened = Instant::now() - self.shared.start;
            self.conn = connect(self.target, self.shared.peers[self.target], opened).await;
        }
        let conn = self.conn.as_mut()?;
        let node = conn.node;
        let line = request_line(key, request);
        let sent = Instant::now();
        let mut record = Attempt {
            worker: self.id,
            node,
            key: key.to_owned(),
            request: request.clone(),
            connected: conn.opened,
            sent: sent - self.shared.start,
            outcome: Outcome::Lost { at: Duration::ZERO },
        };
        let give_up = record.answer_deadline() + self.shared.answer_slack;
        let wait = (self.shared.start + give_up).saturating_duration_since(Instant::now());
        let read = async {
            conn.writer.write_all(line.as_bytes()).await?;
            let mut buf = Vec::new();
            conn.reader.read_until(b'\n', &mut buf).await?;
            Ok::<_, std::io::Error>(buf)
        };
        let result = timeout(wait, read).await;
        let at = Instant::now() - self.shared.start;
        let answer = match result {
            Ok(Ok(buf)) if buf.last() == Some(&b'\n') => {
                let text = String::from_utf8_lossy(&buf[..buf.len() - 1]).into_owned();
                Some(parse(&text, key, request, &self.shared.peers))
            }
            Ok(_) => None,
            Err(_) => {
                record.outcome = Outcome::Unanswered { at };
                None
            }
        };
        match &answer {
            Some(answer) => {
                record.outcome = Outcome::Answered {
                    at,
                    answer: answer.clone(),
                }
            }
            None => {
                if record.outcome == (Outcome::Lost { at: Duration::ZERO }) {
                    record.outcome = Outcome::Lost { at };
                }
                // Unknown state: a late line would be taken for the next answer.
                self.conn = None;
            }
        }
        self.attempts.push(record);
        if let Some(Answer::Moved(target)) = answer {
            self.follow(target).await;
        }
        answer
    }

    async fn follow(&mut self, target: Option<usize>) {
        match target {
            Some(node) => self.target = node,
            None => {
                self.target = (self.target + 1) % self.shared.peers.len();
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
}

async fn connect(node: usize, addr: SocketAddr, opened: Duration) -> Option<Conn> {
    let stream = timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .ok()?
        .ok()?;
    let _ = stream.set_nodelay(true);
    let (read, writer) = stream.into_split();
    Some(Conn {
        node,
        opened,
        reader: BufReader::new(read),
        writer,
    })
}

fn seconds(d: Duration) -> String {
    format!("{}.{:03}", d.as_secs(), d.subsec_millis())
}

/// The protocol line for `request` on `key`, with its LF.
pub fn request_line(key: &str, request: &Request) -> String {
    match request {
        Request::Acquire { wait, lease, kind } => {
            let options = kind.options();
            format!("A {key} {} {}{options}\n", seconds(*wait), seconds(*lease))
        }
        Request::Release { token } => format!("R {key} {token}\n"),
        Request::Renew { token, lease } => format!("K {key} {token} {}\n", seconds(*lease)),
        Request::Query => format!("Q {key}\n"),
    }
}

/// Reads a response line to `request` on `key`. Anything the protocol does
/// not allow as an answer to it is [`Answer::Other`].
pub fn parse(line: &str, key: &str, request: &Request, peers: &[SocketAddr]) -> Answer {
    let other = || Answer::Other(line.to_owned());
    let fields: Vec<&str> = line.split(' ').collect();
    let op = match request {
        Request::Acquire { .. } => "A",
        Request::Release { .. } => "R",
        Request::Renew { .. } => "K",
        Request::Query => "Q",
    };
    match (request, fields.as_slice()) {
        (_, ["M", o, k, addr]) if *o == op && *k == key => {
            if *addr == "-" {
                return Answer::Moved(None);
            }
            match peers.iter().position(|p| p.to_string() == *addr) {
                Some(i) => Answer::Moved(Some(i)),
                None => other(),
            }
        }
        (Request::Acquire { .. }, ["A", k, token]) if *k == key => match token.parse::<u64>() {
            Ok(t) if t > 0 && t.to_string() == *token => Answer::Granted(t),
            _ => other(),
        },
        (Request::Acquire { .. }, ["T", k]) if *k == key => Answer::TimedOut,
        (Request::Release { .. }, ["R", k]) if *k == key => Answer::Released,
        (Request::Renew { .. }, ["K", k]) if *k == key => Answer::Renewed,
        (Request::Release { .. } | Request::Renew { .. }, ["N", o, k]) if *o == op && *k == key => {
            Answer::NotHeld
        }
        // Protocol 1.2 adds fields after these for a key not plain.
        (Request::Query, ["Q", k, token, lease, waiters, ..]) if *k == key => {
            let (Some(token), true, true) = (
                token.strip_prefix("token="),
                lease.starts_with("lease="),
                waiters.starts_with("waiters="),
            ) else {
                return other();
            };
            match token {
                "-" => Answer::Held(None),
                t => match t.parse::<u64>() {
                    Ok(t) if t > 0 => Answer::Held(Some(t)),
                    _ => other(),
                },
            }
        }
        _ => other(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peers() -> Vec<SocketAddr> {
        vec![
            "127.0.0.1:1001".parse().unwrap_or_else(|e| panic!("{e}")),
            "127.0.0.1:1002".parse().unwrap_or_else(|e| panic!("{e}")),
        ]
    }

    #[test]
    fn lines_follow_the_protocol() {
        let acquire = Request::Acquire {
            wait: Duration::from_millis(50),
            lease: Duration::from_millis(2500),
            kind: Kind::Plain,
        };
        assert_eq!(request_line("k", &acquire), "A k 0.050 2.500\n");
        assert_eq!(request_line("k", &Request::Query), "Q k\n");
    }

    #[test]
    fn answers_are_read_for_their_request_only() {
        let p = peers();
        let acquire = Request::Acquire {
            wait: Duration::from_secs(1),
            lease: Duration::from_secs(1),
            kind: Kind::Plain,
        };
        let release = Request::Release { token: 3 };
        assert_eq!(parse("A k 7", "k", &acquire, &p), Answer::Granted(7));
        assert_eq!(parse("T k", "k", &acquire, &p), Answer::TimedOut);
        assert_eq!(parse("N R k", "k", &release, &p), Answer::NotHeld);
        assert_eq!(parse("R k", "k", &release, &p), Answer::Released);
        assert!(matches!(
            parse("A other 7", "k", &acquire, &p),
            Answer::Other(_)
        ));
        assert!(matches!(
            parse("N K k", "k", &release, &p),
            Answer::Other(_)
        ));
        assert!(matches!(
            parse("A k 0", "k", &acquire, &p),
            Answer::Other(_)
        ));
        assert_eq!(
            parse("Q k token=- lease=- waiters=0", "k", &Request::Query, &p),
            Answer::Held(None)
        );
        assert_eq!(
            parse("Q k token=9 lease=1.5 waiters=2", "k", &Request::Query, &p),
            Answer::Held(Some(9))
        );
    }

    #[test]
    fn redirects_must_name_a_peer() {
        let p = peers();
        let release = Request::Release { token: 3 };
        assert_eq!(
            parse("M R k 127.0.0.1:1002", "k", &release, &p),
            Answer::Moved(Some(1))
        );
        assert_eq!(parse("M R k -", "k", &release, &p), Answer::Moved(None));
        assert!(matches!(
            parse("M R k 10.0.0.1:9", "k", &release, &p),
            Answer::Other(_)
        ));
    }
}
