//! A fault-injecting TCP proxy: put it between a client and a node to cut,
//! stall or refuse connections at the moment a test chooses. It can also
//! record what clients send (the first [`RECORD_LIMIT`] bytes of each
//! connection), so a test can replay a real node's link.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Debug)]
struct Control {
    stalled: watch::Sender<bool>,
    /// Bumped by `cut_all`: every connection open at that moment closes.
    cuts: watch::Sender<u64>,
    /// Accept numbers of connections cut one by one.
    cut_ones: watch::Sender<Vec<usize>>,
    refuse: AtomicBool,
    /// Connections accepted before this number are frozen for good (a
    /// partition caught them).
    frozen_below: watch::Sender<usize>,
    open: AtomicUsize,
    accepted: AtomicUsize,
    /// Whether connections accepted now are recorded.
    record: AtomicBool,
    /// Per accept number, the first bytes its client sent.
    recordings: Mutex<BTreeMap<usize, Vec<u8>>>,
}

/// Bytes kept of what one client sent, at most.
pub const RECORD_LIMIT: usize = 256 * 1024;

/// A proxy on 127.0.0.1 forwarding every connection to `upstream`.
/// Dropping it closes the listener and every connection.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    control: Arc<Control>,
    accept: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|err| panic!("proxy: cannot bind 127.0.0.1:0: {err}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|err| panic!("proxy: no local address: {err}"));
        let control = Arc::new(Control {
            stalled: watch::channel(false).0,
            cuts: watch::channel(0).0,
            cut_ones: watch::channel(Vec::new()).0,
            refuse: AtomicBool::new(false),
            frozen_below: watch::channel(0).0,
            open: AtomicUsize::new(0),
            accepted: AtomicUsize::new(0),
            record: AtomicBool::new(false),
            recordings: Mutex::new(BTreeMap::new()),
        });
        let accept = tokio::spawn(accept_loop(listener, upstream, Arc::clone(&control)));
        FaultProxy {
            addr,
            control,
            accept,
        }
    }

    /// The address clients should connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Closes every connection open now, on both sides. Bytes held by a
    /// stall are dropped with them.
    pub fn cut_all(&self) {
        self.control.cuts.send_modify(|n| *n += 1);
    }

    /// Closes only the connection accepted `n`-th (from 0, refused ones
    /// counted), if it is still open.
    pub fn cut(&self, n: usize) {
        self.control.cut_ones.send_modify(|cut| cut.push(n));
    }

    /// While on, no byte moves in either direction; open connections stay
    /// open, so the peers see a silent, not a broken, link.
    pub fn stall(&self, on: bool) {
        self.control.stalled.send_replace(on);
    }

    /// While on, new connections are accepted and closed at once.
    pub fn refuse(&self, on: bool) {
        self.control.refuse.store(on, Ordering::SeqCst);
    }

    /// A network partition, as the connections through this proxy see it.
    /// While on, new connections are refused and every open one goes
    /// silent. The silent ones stay silent after the partition ends, as a
    /// real link does while its retransmissions back off (seconds), until a
    /// side closes them; connections made after the heal flow at once.
    pub fn partition(&self, on: bool) {
        if on {
            let accepted = self.control.accepted.load(Ordering::SeqCst);
            self.control.frozen_below.send_replace(accepted);
        }
        self.refuse(on);
    }

    /// Connections currently forwarded.
    pub fn open_connections(&self) -> usize {
        self.control.open.load(Ordering::SeqCst)
    }

    /// Connections accepted since the start, refused ones included.
    pub fn accepted(&self) -> usize {
        self.control.accepted.load(Ordering::SeqCst)
    }

    /// While on, connections accepted keep a copy of the first
    /// [`RECORD_LIMIT`] bytes their client sends (see
    /// [`FaultProxy::recordings`]).
    pub fn record(&self, on: bool) {
        self.control.record.store(on, Ordering::SeqCst);
    }

    /// What each recorded connection's client sent so far, by accept
    /// number.
    pub fn recordings(&self) -> BTreeMap<usize, Vec<u8>> {
        self.control
            .recordings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut_all();
    }
}

async fn accept_loop(listener: TcpListener, upstream: SocketAddr, control: Arc<Control>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let n = control.accepted.fetch_add(1, Ordering::SeqCst);
        if control.refuse.load(Ordering::SeqCst) {
            drop(client);
            continue;
        }
        if control.record.load(Ordering::SeqCst) {
            control
                .recordings
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(n, Vec::new());
        }
        tokio::spawn(forward(n, client, upstream, Arc::clone(&control)));
    }
}

async fn forward(n: usize, client: TcpStream, upstream: SocketAddr, control: Arc<Control>) {
    let mut cuts = control.cuts.subscribe();
    let mut cut_ones = control.cut_ones.subscribe();
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    control.open.fetch_add(1, Ordering::SeqCst);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    // Biased towards the cuts: bytes held by a stall must die with a cut
    // even when the stall lifts right after it.
    tokio::select! {
        biased;
        _ = cuts.changed() => {}
        _ = cut_ones.wait_for(|cut| cut.contains(&n)) => {}
        () = pump(client_read, server_write, gate(n, &control), Some(&control)) => {}
        () = pump(server_read, client_write, gate(n, &control), None) => {}
    }
    control.open.fetch_sub(1, Ordering::SeqCst);
}

/// What holds bytes back on connection `n`: a stall, or a partition that
/// froze it.
struct Gate {
    n: usize,
    stalled: watch::Receiver<bool>,
    frozen_below: watch::Receiver<usize>,
}

fn gate(n: usize, control: &Control) -> Gate {
    Gate {
        n,
        stalled: control.stalled.subscribe(),
        frozen_below: control.frozen_below.subscribe(),
    }
}

impl Gate {
    /// Waits until bytes may move; false if the proxy is going away.
    async fn open(&mut self) -> bool {
        let n = self.n;
        self.frozen_below
            .wait_for(|&below| n >= below)
            .await
            .is_ok()
            && self.stalled.wait_for(|stalled| !*stalled).await.is_ok()
    }
}

/// Copies one direction until either side closes; each chunk read waits
/// for the gate to open before it is written on. With `recorder`, what
/// is read is also added to the connection's recording, if it has one.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut gate: Gate,
    recorder: Option<&Control>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if let Some(control) = recorder {
            let mut recordings = control
                .recordings
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(recording) = recordings.get_mut(&gate.n) {
                let room = RECORD_LIMIT.saturating_sub(recording.len());
                recording.extend_from_slice(&buf[..n.min(room)]);
            }
        }
        if !gate.open().await {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;
    use std::time::Duration;

    /// An upstream that echoes every byte back.
    async fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    async fn roundtrip(s: &mut TcpStream, msg: &[u8], within: Duration) -> Option<Vec<u8>> {
        s.write_all(msg).await.ok()?;
        let mut buf = vec![0; msg.len()];
        tokio::time::timeout(within, s.read_exact(&mut buf))
            .await
            .ok()?
            .ok()?;
        Some(buf)
    }

    #[tokio::test]
    async fn forwards_stalls_and_cuts() {
        let proxy = FaultProxy::start(echo().await).await;
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        let second = Duration::from_secs(5);
        assert_eq!(roundtrip(&mut s, b"hello", second).await.unwrap(), b"hello");

        proxy.stall(true);
        assert!(roundtrip(&mut s, b"x", Duration::from_millis(300))
            .await
            .is_none());
        proxy.stall(false);
        let mut late = [0u8; 1];
        tokio::time::timeout(second, s.read_exact(&mut late))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&late, b"x", "stalled bytes flow once the stall lifts");

        proxy.cut_all();
        let mut buf = [0u8; 1];
        let n = tokio::time::timeout(second, s.read(&mut buf))
            .await
            .unwrap();
        assert!(matches!(n, Ok(0) | Err(_)), "a cut connection reads EOF");
    }

    #[tokio::test]
    async fn records_what_clients_send_while_told_to() {
        let proxy = FaultProxy::start(echo().await).await;
        let within = Duration::from_secs(5);
        let mut unrecorded = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(roundtrip(&mut unrecorded, b"a", within).await.is_some());
        proxy.record(true);
        let mut recorded = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(roundtrip(&mut recorded, b"bc", within).await.is_some());
        assert!(roundtrip(&mut recorded, b"d", within).await.is_some());
        let recordings = proxy.recordings();
        assert_eq!(recordings.len(), 1, "{recordings:?}");
        assert_eq!(recordings.get(&1).map(Vec::as_slice), Some(&b"bcd"[..]));
    }

    #[tokio::test]
    async fn refuses_new_connections_while_told_to() {
        let proxy = FaultProxy::start(echo().await).await;
        proxy.refuse(true);
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        let mut buf = [0u8; 1];
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .unwrap();
        assert!(matches!(n, Ok(0) | Err(_)));
        proxy.refuse(false);
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(roundtrip(&mut s, b"ok", Duration::from_secs(5))
            .await
            .is_some());
        assert_eq!(proxy.accepted(), 2);
    }

    #[tokio::test]
    async fn a_partition_freezes_open_connections_for_good() {
        let proxy = FaultProxy::start(echo().await).await;
        let mut old = TcpStream::connect(proxy.addr()).await.unwrap();
        let within = Duration::from_secs(5);
        assert!(roundtrip(&mut old, b"1", within).await.is_some());
        proxy.partition(true);
        let mut during = TcpStream::connect(proxy.addr()).await.unwrap();
        let mut buf = [0u8; 1];
        let n = tokio::time::timeout(within, during.read(&mut buf))
            .await
            .unwrap();
        assert!(matches!(n, Ok(0) | Err(_)), "refused during the partition");
        proxy.partition(false);
        let short = Duration::from_millis(200);
        assert!(roundtrip(&mut old, b"2", short).await.is_none());
        let mut new = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(roundtrip(&mut new, b"3", within).await.is_some());
    }

    #[tokio::test]
    async fn cuts_one_connection_alone() {
        let proxy = FaultProxy::start(echo().await).await;
        let mut first = TcpStream::connect(proxy.addr()).await.unwrap();
        let mut second = TcpStream::connect(proxy.addr()).await.unwrap();
        let within = Duration::from_secs(5);
        assert!(roundtrip(&mut first, b"1", within).await.is_some());
        assert!(roundtrip(&mut second, b"2", within).await.is_some());
        proxy.cut(0);
        let mut buf = [0u8; 1];
        let n = tokio::time::timeout(within, first.read(&mut buf))
            .await
            .unwrap();
        assert!(matches!(n, Ok(0) | Err(_)), "the cut connection reads EOF");
        assert!(roundtrip(&mut second, b"3", within).await.is_some());
        assert_eq!(proxy.open_connections(), 1);
    }
}
