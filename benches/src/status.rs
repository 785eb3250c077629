//! Asking a Baton node for its `S` line: cluster set-up finds the node that
//! serves from its `role=`, the waiter storm watches `waiters=` fill up.
//! [`ask`] is the one-request exchange behind it (failover's attempts too).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// One status answer, as `field=value` pairs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    fields: Vec<(String, String)>,
}

impl Status {
    /// Parses `S a=1 b=2`; `None` for anything that is not an `S` line.
    pub fn parse(line: &str) -> Option<Self> {
        let rest = line.trim_end().strip_prefix('S')?;
        if !(rest.is_empty() || rest.starts_with(' ')) {
            return None;
        }
        let fields = rest
            .split(' ')
            .filter_map(|field| field.split_once('='))
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect();
        Some(Self { fields })
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(field, _)| field == name)
            .map(|(_, value)| value.as_str())
    }

    pub fn number(&self, name: &str) -> Option<u64> {
        self.get(name)?.parse().ok()
    }
}

/// Connects, asks `S` once, and closes. `None` on any failure: callers poll
/// until a deadline, and a node that is down or starting is not an error yet.
pub async fn query(addr: SocketAddr, limit: Duration) -> Option<Status> {
    Status::parse(&ask(addr, b"S\n", limit).await?)
}

/// Connects, writes `request`, reads one line back (with its LF) and
/// closes, all within `limit`; `None` on any failure.
pub async fn ask(addr: SocketAddr, request: &[u8], limit: Duration) -> Option<String> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.ok()?;
        stream.write_all(request).await.ok()?;
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line).await.ok()?;
        Some(line)
    };
    timeout(limit, exchange).await.ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_fields_in_any_order() {
        let status = Status::parse("S role=leader mode=raft waiters=12 active=127.0.0.1:5\n");
        let status = status.as_ref();
        assert_eq!(status.and_then(|s| s.get("role")), Some("leader"));
        assert_eq!(status.and_then(|s| s.number("waiters")), Some(12));
        assert_eq!(status.and_then(|s| s.get("active")), Some("127.0.0.1:5"));
        assert_eq!(status.and_then(|s| s.get("locks")), None);
    }

    #[test]
    fn only_status_lines() {
        assert_eq!(Status::parse("E ? ? unknown op"), None);
        assert_eq!(Status::parse("Sx=1"), None);
        assert_eq!(Status::parse("S"), Some(Status::default()));
    }
}
