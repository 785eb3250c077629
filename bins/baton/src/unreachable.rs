//! Why no node could be reached, in words an operator can act on:
//! `cannot reach 127.0.0.1:7411: connection refused`.
//!
//! The client only says that no connection is usable; when it gives up,
//! baton dials each address once more itself (TCP only, bounded) to name
//! the address and the cause. Baton is exiting then, so the dials block.

use std::net::{TcpStream, ToSocketAddrs};
use std::sync::OnceLock;
use std::time::Duration;

/// How long one diagnostic dial may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(2);

/// At most this many addresses are dialled (one thread each).
const MAX_DIALS: usize = 16;

/// The addresses of `--servers`, set once at start.
static SERVERS: OnceLock<Vec<String>> = OnceLock::new();

/// Remembers the addresses for [`explain`].
pub fn remember(servers: &[String]) {
    let _ = SERVERS.set(unique(servers));
}

/// The addresses in their order, each once.
pub fn unique(servers: &[String]) -> Vec<String> {
    let mut unique: Vec<String> = Vec::new();
    for addr in servers {
        if !unique.contains(addr) {
            unique.push(addr.clone());
        }
    }
    unique
}

/// `cannot reach A: cause; B: cause (no server reachable)`, naming too
/// the addresses that do take connections, or `None` if every address
/// answers a dial now (the failure was above TCP).
pub fn explain() -> Option<String> {
    let servers = SERVERS.get()?;
    let causes: Vec<(String, String)> = std::thread::scope(|scope| {
        let dials: Vec<_> = servers
            .iter()
            .take(MAX_DIALS)
            .map(|addr| scope.spawn(move || dial(addr).err().map(|why| (addr.clone(), why))))
            .collect();
        dials
            .into_iter()
            .filter_map(|dial| dial.join().ok().flatten())
            .collect()
    });
    let reached: Vec<&str> = servers
        .iter()
        .take(MAX_DIALS)
        .filter(|addr| causes.iter().all(|(down, _)| down != *addr))
        .map(String::as_str)
        .collect();
    sentence(&causes, &reached)
}

/// The line for `explain`: the unreachable with their causes, then the
/// reachable ones, which took the connection but did not serve.
fn sentence(causes: &[(String, String)], reached: &[&str]) -> Option<String> {
    if causes.is_empty() {
        return None;
    }
    let list: Vec<String> = causes
        .iter()
        .map(|(addr, why)| format!("{addr}: {why}"))
        .collect();
    let list = list.join("; ");
    Some(match reached {
        [] => format!("cannot reach {list} (no server reachable)"),
        [one] => format!(
            "cannot reach {list}; {one} takes connections but did not serve the request \
             (it knows no leader or active node that can be reached, or it is stopped)"
        ),
        many => format!(
            "cannot reach {list}; {} take connections but did not serve the request \
             (they know no leader or active node that can be reached, or they are stopped)",
            many.join(", ")
        ),
    })
}

/// The cause of one address's failure, if dialling it fails.
pub fn dial(addr: &str) -> Result<(), String> {
    let resolved: Vec<_> = addr
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve it: {}", words(&e)))?
        .collect();
    let mut last = "it resolves to no address".to_owned();
    for target in resolved {
        match TcpStream::connect_timeout(&target, DIAL_TIMEOUT) {
            Ok(_) => return Ok(()),
            Err(err) => last = words(&err),
        }
    }
    Err(last)
}

/// An I/O error as lowercase words, without the `(os error N)` tail.
pub fn words(err: &std::io::Error) -> String {
    match err.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".to_owned(),
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
            format!("no answer within {} s", DIAL_TIMEOUT.as_secs())
        }
        _ => {
            let text = err.to_string();
            let text = match text.find(" (os error") {
                Some(at) => &text[..at],
                None => &text,
            };
            let mut chars = text.chars();
            match chars.next() {
                Some(first) => first.to_lowercase().chain(chars).collect(),
                None => "unknown error".to_owned(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_nodes_that_took_the_connection_too() {
        let down = [("10.0.0.2:7411".to_owned(), "connection refused".to_owned())];
        assert_eq!(sentence(&[], &["10.0.0.1:7411"]), None);
        assert_eq!(
            sentence(&down, &[]).as_deref(),
            Some("cannot reach 10.0.0.2:7411: connection refused (no server reachable)")
        );
        let line = sentence(&down, &["10.0.0.1:7411"]).unwrap_or_default();
        assert!(
            line.starts_with("cannot reach 10.0.0.2:7411: connection refused; 10.0.0.1:7411 takes"),
            "{line}"
        );
        assert!(!line.contains("no server reachable"), "{line}");
    }

    #[test]
    fn names_a_refused_connection() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        assert_eq!(dial(&addr), Ok(()));
        drop(listener);
        assert_eq!(dial(&addr), Err("connection refused".to_owned()));
    }

    #[test]
    fn names_a_bad_address() {
        let why = dial("no-port-here").expect_err("not an address");
        assert!(why.starts_with("cannot resolve it: "), "{why}");
        assert!(!why.contains("os error"), "{why}");
    }
}
