//! Configuration of a [`Client`]: the server list and the timeouts.

use std::sync::Arc;
use std::time::Duration;

use crate::auth::Credentials;
use crate::client::Client;
use crate::error::{Error, Result};
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
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            servers: Vec::new(),
            connect_timeout: Duration::from_secs(3),
            request_timeout: Duration::from_secs(5),
            credentials: None,
            tls: None,
        }
    }
}

impl ClientBuilder {
    /// The nodes' client addresses (`host:port`), as in the cluster's peer
    /// list. With a single address the client keeps two connections to it.
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

    /// How long one connection attempt may take (default 3 s).
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

    /// Opens the connections and waits for their first attempt.
    ///
    /// Fails with [`Error::NoServer`] when not a single node could be
    /// reached, [`Error::AuthenticationFailed`] (or
    /// [`Error::AuthenticationNotEnabled`]) when nodes were reached but
    /// none took the credentials, [`Error::Tls`] when every node failed for
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
        if self.servers.is_empty() {
            return Err(Error::NoAddress);
        }
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
            &self.servers,
            self.connect_timeout,
            self.request_timeout,
            credentials,
            tls,
        );
        pool.settle().await;
        if pool.pick_now().is_none() {
            return Err(pool.auth_refusal().unwrap_or_else(|| pool.no_server()));
        }
        Ok(Client::from_pool(Arc::new(pool)))
    }
}
