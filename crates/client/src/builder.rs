//! Configuration of a [`Client`]: the server list and the timeouts.

use std::sync::Arc;
use std::time::Duration;

use crate::auth::Credentials;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::liveness::Liveness;
use crate::pool::Pool;
use crate::tls::TlsConfig;

/// Builds a [`Client`]; obtained from [`Client::builder`].
///
/// ```no_run
/// # async fn demo() -> baton_client::Result<()> {
/// # use std::time::Duration;
/// let client = baton_client::Client::builder()
///     .servers(["127.0.0.1:7411"])
///     .connect_timeout(Duration::from_secs(1))
///     .build()
///     .await?;
/// # let _ = client;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    servers: Vec<String>,
    connect_timeout: Duration,
    request_timeout: Duration,
    /// Checked when given, reported by `build` (the builder stays `Clone`).
    credentials: Option<Result<Credentials, String>>,
    tls: Option<TlsConfig>,
    liveness: Liveness,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            servers: Vec::new(),
            connect_timeout: Duration::from_secs(3),
            request_timeout: Duration::from_secs(5),
            credentials: None,
            tls: None,
            liveness: Liveness::default(),
        }
    }
}

impl ClientBuilder {
    /// The nodes' client addresses (`host:port`: an IP address, `[v6]` in
    /// brackets, or a DNS name), as in the cluster's peer list. An entry may
    /// also be a comma-separated list, as the `baton` CLI takes them
    /// (`"10.0.0.1:7411,10.0.0.2:7411"`). With a single address the client
    /// keeps two connections to it. [`build`](Self::build) refuses an
    /// address that is not `host:port` with [`Error::InvalidAddress`].
    ///
    /// ```
    /// let builder = baton_client::Client::builder()
    ///     .servers(["10.0.0.1:7411", "10.0.0.2:7411"]);
    /// # let _ = builder;
    /// ```
    pub fn servers<I, S>(mut self, servers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.servers = servers.into_iter().map(Into::into).collect();
        self
    }

    /// How long one connection attempt may take (default 3 s); `build`
    /// waits at most this long for every node to answer its first `S`.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let builder = baton_client::Client::builder()
    ///     .servers(["127.0.0.1:7411"])
    ///     .connect_timeout(Duration::from_millis(500));
    /// # let _ = builder;
    /// ```
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long a release, renew or status waits for an answer on one
    /// connection, and the grace an acquire gets beyond its wait (default 5 s).
    ///
    /// ```
    /// # use std::time::Duration;
    /// let builder = baton_client::Client::builder()
    ///     .servers(["127.0.0.1:7411"])
    ///     .request_timeout(Duration::from_secs(2));
    /// # let _ = builder;
    /// ```
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// How long a connection with requests in flight may hear nothing from
    /// its node before it is treated as cut (default 4 s; at least 100 ms).
    ///
    /// A node that stops answering (a frozen process, a stuck disk, a long
    /// pause) keeps its sockets open, so nothing breaks by itself. The
    /// protocol has a node answer every request within 3 s (an acquire
    /// within its wait plus 3 s), so after a quarter of this silence the
    /// client asks the node for its status (`S`), which a live node answers
    /// at once even while acquires wait; if nothing comes by the end, the
    /// connection is closed, left out of the rotation and redialled in the
    /// background, its pending acquires go to the next connection with what
    /// is left of their wait, and its releases and renewals are retried
    /// elsewhere. A new connection is used once its node answered a first
    /// `S`. Below the default a node that is only slow (a loaded machine)
    /// may be dropped.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let builder = baton_client::Client::builder()
    ///     .servers(["10.0.0.1:7411", "10.0.0.2:7411"])
    ///     .unresponsive_after(Duration::from_secs(6));
    /// # let _ = builder;
    /// ```
    pub fn unresponsive_after(mut self, silence: Duration) -> Self {
        self.liveness = Liveness::new(silence);
        self
    }

    /// Authenticates every connection (and every reconnection) as `user`
    /// with `secret` (`U <user> <secret>`) before using it, for nodes run
    /// with `--auth-file`. A wrong pair makes [`build`](Self::build) fail
    /// with [`Error::AuthenticationFailed`]; one that breaks the protocol's
    /// rules with [`Error::InvalidCredentials`].
    ///
    /// ```
    /// let builder = baton_client::Client::builder()
    ///     .servers(["127.0.0.1:7411"])
    ///     .credentials("billing", std::env::var("BATON_SECRET").unwrap_or_default());
    /// # let _ = builder;
    /// ```
    pub fn credentials(mut self, user: impl AsRef<[u8]>, secret: impl AsRef<[u8]>) -> Self {
        self.credentials =
            Some(Credentials::new(user.as_ref(), secret.as_ref()).map_err(|e| e.to_string()));
        self
    }

    /// Speaks TLS to every node, trusting `tls`'s CA (and showing its
    /// client certificate, if it has one). A node that does not speak TLS,
    /// or whose certificate does not verify, is an [`Error::Tls`].
    ///
    /// ```no_run
    /// let tls = baton_client::TlsConfig::from_ca_file("/etc/baton/ca.pem")?;
    /// let builder = baton_client::Client::builder()
    ///     .servers(["node-1.example:7411"])
    ///     .tls(tls);
    /// # let _ = builder;
    /// # Ok::<(), baton_client::Error>(())
    /// ```
    pub fn tls(mut self, tls: TlsConfig) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Opens the connections and waits for their first attempt: a
    /// connection is usable once its node answered an `S`.
    ///
    /// Fails with [`Error::InvalidAddress`] (before dialling) when an
    /// address is not `host:port`, [`Error::NoServer`] when not a single
    /// node could be reached and answered within the connect timeout (a
    /// frozen node accepts connections but answers nothing),
    /// [`Error::AuthenticationFailed`] (or
    /// [`Error::AuthenticationNotEnabled`]) when nodes were reached but
    /// none took the credentials, [`Error::AuthenticationRequired`] when
    /// they require credentials and none were given, [`Error::Tls`] when every node failed for
    /// a TLS reason; once built, the client reconnects broken connections
    /// in the background every 3 seconds for as long as it lives.
    ///
    /// ```no_run
    /// # async fn demo() {
    /// match baton_client::Client::builder().servers(["127.0.0.1:7411"]).build().await {
    ///     Ok(client) => { let _ = client; }
    ///     Err(baton_client::Error::NoServer) => eprintln!("no node reachable"),
    ///     Err(err) => eprintln!("{err}"),
    /// }
    /// # }
    /// ```
    pub async fn build(self) -> Result<Client> {
        let servers = server_list(&self.servers)?;
        let credentials = self
            .credentials
            .transpose()
            .map_err(|why| Error::InvalidCredentials { why })?
            .map(Arc::new);
        let tls = self
            .tls
            .as_ref()
            .map(TlsConfig::client_config)
            .transpose()?;
        let pool = Pool::start(
            &servers,
            self.connect_timeout,
            self.request_timeout,
            credentials,
            tls,
            self.liveness,
        );
        pool.settle().await;
        if pool.pick_now().is_none() {
            return Err(pool.auth_refusal().unwrap_or_else(|| pool.no_server()));
        }
        Ok(Client::from_pool(Arc::new(pool)))
    }
}

/// The addresses given, comma-separated lists split, each checked to be
/// `host:port`: a typo is refused here rather than failing every dial.
fn server_list(given: &[String]) -> Result<Vec<String>> {
    let mut servers = Vec::new();
    for entry in given {
        for addr in entry.split(',').map(str::trim).filter(|a| !a.is_empty()) {
            baton_proto::host_port(addr).map_err(|why| Error::InvalidAddress {
                addr: addr.to_owned(),
                why,
            })?;
            servers.push(addr.to_owned());
        }
    }
    if servers.is_empty() {
        return Err(Error::NoAddress);
    }
    Ok(servers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(given: &[&str]) -> Result<Vec<String>> {
        server_list(&given.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn comma_joined_lists_are_split_like_the_cli_does() {
        let servers = list(&["10.0.0.1:7411, 10.0.0.2:7411,", "node-3:7411"]);
        assert_eq!(
            servers.ok(),
            Some(vec![
                "10.0.0.1:7411".to_owned(),
                "10.0.0.2:7411".to_owned(),
                "node-3:7411".to_owned()
            ])
        );
        assert!(matches!(list(&[" , "]), Err(Error::NoAddress)));
        assert!(matches!(list(&[]), Err(Error::NoAddress)));
    }

    #[test]
    fn a_malformed_address_is_refused_with_its_text() {
        for bad in ["a..b:7411", "bogus", "[::1]", "host:70000", "a b:1"] {
            match list(&["127.0.0.1:7411", bad]) {
                Err(Error::InvalidAddress { addr, why }) => {
                    assert_eq!(addr, bad);
                    assert!(why.contains("host:port"), "{why}");
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn build_refuses_a_malformed_host_before_dialling() {
        let built = ClientBuilder::default()
            .servers(["a..b:7411"])
            .build()
            .await;
        let err = built.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            err.starts_with("invalid server address: expected host:port")
                && err.contains("\"a..b:7411\""),
            "{err}"
        );
    }
}
