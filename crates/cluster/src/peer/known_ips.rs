//! The IP addresses of a node's peers, for the handshake budget
//! ([`super::handshakes`]): peers are configured as `host:port`, and a
//! name is resolved the way a dial resolves it (tokio's lookup, every
//! address it gives), again now and then, as a dial finds a peer
//! restarted with a new address.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use super::gate::PeerGate;

/// How often the peers' names are resolved again (and, in Raft, the
/// membership's addresses read again). Until then a peer at a new
/// address shares the budget of unknown sources.
pub const REFRESH_EVERY: Duration = Duration::from_secs(10);

/// The addresses of peers given as IP addresses; names give none.
pub fn literal_ips<'a>(peers: impl IntoIterator<Item = &'a str>) -> Vec<IpAddr> {
    peers
        .into_iter()
        .filter_map(|peer| peer.parse::<SocketAddr>().ok())
        .map(|addr| addr.ip())
        .collect()
}

/// The addresses of `peers`, names resolved now: every address of a name,
/// counted once for that peer. A name that does not resolve gives none.
pub async fn resolve(peers: &[String]) -> Vec<IpAddr> {
    let mut ips = Vec::with_capacity(peers.len());
    for peer in peers {
        if let Ok(addr) = peer.parse::<SocketAddr>() {
            ips.push(addr.ip());
            continue;
        }
        let Ok(found) = tokio::net::lookup_host(peer.as_str()).await else {
            continue;
        };
        let mut of_peer: Vec<IpAddr> = found.map(|addr| addr.ip().to_canonical()).collect();
        of_peer.sort_unstable();
        of_peer.dedup();
        ips.extend(of_peer);
    }
    ips
}

/// Keeps `gate`'s peer addresses those of `peers()`, resolved every
/// [`REFRESH_EVERY`]; runs until dropped.
pub async fn keep_current(gate: &PeerGate, peers: impl Fn() -> Vec<String>) {
    loop {
        gate.set_peer_ips(resolve(&peers()).await);
        tokio::time::sleep(REFRESH_EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ips_are_taken_as_they_are_and_names_resolved() {
        let peers = [
            "127.0.0.2:7411".to_string(),
            "[::1]:7411".to_string(),
            "localhost:7411".to_string(),
            "no-such-host.invalid:7411".to_string(),
        ];
        assert_eq!(
            literal_ips(peers.iter().map(String::as_str)),
            vec![IpAddr::from([127, 0, 0, 2]), "::1".parse().expect("ip")]
        );
        let resolved = resolve(&peers).await;
        assert_eq!(
            &resolved[..2],
            &literal_ips(peers.iter().map(String::as_str))[..]
        );
        assert!(
            resolved[2..].iter().all(IpAddr::is_loopback),
            "{resolved:?}"
        );
        assert!(resolved.len() > 2, "localhost resolves: {resolved:?}");
    }
}
