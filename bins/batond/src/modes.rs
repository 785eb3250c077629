//! How each mode runs once its plan is made: the server started, the HTTP
//! endpoint beside it, and the stop (a signal, a storage failure, a dead
//! Raft core) with its hand-over and final save.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use baton_cluster::{priority, raft};
use baton_server::{DataDir, ServerConfig, StateFileError};
use tokio::sync::oneshot;

use crate::{announce, http, members, Plan};

/// What a node does once its client port is bound.
#[derive(Clone, Copy)]
pub struct Bound<'a> {
    pub plan: &'a Plan,
    pub data_dir: Option<&'a DataDir>,
    /// `--http-listen`.
    pub http: Option<SocketAddr>,
}

impl Bound<'_> {
    /// Records the bound address in the data directory's lock file, then
    /// tells the world the node is up.
    fn at(self, addr: SocketAddr) -> Result<(), String> {
        if let Some(dir) = self.data_dir {
            dir.record_holder(&self.plan.holder(&addr.to_string()))
                .map_err(|e| e.to_string())?;
        }
        announce(addr);
        Ok(())
    }

    /// Starts the HTTP endpoint (if asked for) among `server`'s tasks,
    /// then announces the node and the endpoint.
    async fn serving<N: baton_server::LockNode>(
        self,
        server: &baton_server::Server<N>,
        config: &ServerConfig,
    ) -> Result<Option<http::Started>, String> {
        self.serving_with(server, config, None).await
    }

    /// [`Bound::serving`], with a Raft node's membership changes.
    async fn serving_with<N: baton_server::LockNode>(
        self,
        server: &baton_server::Server<N>,
        config: &ServerConfig,
        members: Option<Arc<dyn baton_http::members::MembershipAdmin>>,
    ) -> Result<Option<http::Started>, String> {
        let started = http::start(self.http, server, config, members).await?;
        self.at(server.local_addr())?;
        http::announce(&started);
        Ok(started)
    }
}

/// A single node stops at the signal, or when its state can no longer be
/// saved; then it saves its final state.
pub async fn serve_single(
    config: &ServerConfig,
    bound: Bound<'_>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), String> {
    let dir = bound.data_dir.map(DataDir::path);
    let single = baton_server::start_single(config.clone(), dir)
        .await
        .map_err(|e| e.to_string())?;
    let endpoint = bound.serving(&single.server, config).await?;
    let persister = single.persister;
    let watched = persister.clone();
    let (stopped, stop_reason) = oneshot::channel::<Option<Arc<StateFileError>>>();
    single
        .server
        .run(async move {
            let failure = first_of(shutdown, async {
                match &watched {
                    Some(persister) => persister.failed().await,
                    None => std::future::pending().await,
                }
            })
            .await;
            if let Some(error) = &failure {
                http::storage_failed(&endpoint, error);
            }
            let _ = stopped.send(failure);
        })
        .await;
    storage_verdict(stop_reason.await.ok().flatten())?;
    // Every connection is closed: this is the final state.
    if let Some(persister) = persister {
        persister
            .write_if_changed()
            .await
            .map_err(|e| failed_to_save(&e))?;
    }
    Ok(())
}

/// A priority node stops at the signal, or when its state can no longer be
/// saved; an active one hands its role over first.
pub async fn serve_priority(
    config: &ServerConfig,
    settings: &priority::PrioritySettings,
    bound: Bound<'_>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), String> {
    let cluster = priority::start(config.clone(), settings.clone())
        .await
        .map_err(|e| e.to_string())?;
    let endpoint = bound.serving(&cluster.server, config).await?;
    let handle = cluster.handle;
    let shell = handle.clone();
    let (stopped, stop_reason) = oneshot::channel::<Option<Arc<StateFileError>>>();
    // The active hands its role over before the server stops, so
    // its clients are redirected to a node that already serves;
    // so does an active whose state can no longer be saved.
    cluster
        .server
        .run(async move {
            let mut failure = first_of(shutdown, handle.storage_failed()).await;
            if let Some(error) = &failure {
                http::storage_failed(&endpoint, error);
            }
            handle.hand_off().await;
            if failure.is_none() {
                failure = handle.persist().await.err();
            }
            let _ = stopped.send(failure);
        })
        .await;
    // Then the peer links and the pump.
    shell.shut_down().await;
    storage_verdict(stop_reason.await.ok().flatten())
}

/// A Raft node stops at the signal, its leader handing the lead over
/// first, or exits when its consensus core dies.
pub async fn serve_raft(
    config: &ServerConfig,
    settings: &raft::RaftSettings,
    bound: Bound<'_>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), String> {
    let cluster = raft::start(config.clone(), settings.clone())
        .await
        .map_err(|e| e.to_string())?;
    let admin = members::admin(cluster.handle.membership());
    let endpoint = bound
        .serving_with(&cluster.server, config, Some(admin))
        .await?;
    let handle = cluster.handle;
    let stopping = handle.clone();
    let core_died = handle.core_died();
    // The leader hands the lead over before the server stops, so
    // its clients are redirected to a node that already serves.
    let serving = cluster.server.run(async move {
        shutdown.await;
        stopping.hand_off().await;
    });
    // A node whose consensus core died (a storage error) can
    // neither lead nor follow: it exits so a supervisor restarts it.
    tokio::select! {
        () = serving => {}
        reason = core_died => {
            http::storage_failed(&endpoint, &reason);
            return Err(format!("the Raft core stopped, exiting: {reason}"));
        }
    }
    handle.shut_down().await;
    Ok(())
}

/// `None` when `signal` comes first, the storage error when `failed` does.
async fn first_of(
    signal: impl Future<Output = ()>,
    failed: impl Future<Output = Arc<StateFileError>>,
) -> Option<Arc<StateFileError>> {
    tokio::select! {
        () = signal => None,
        error = failed => Some(error),
    }
}

/// A node whose state could not be saved exits non-zero, so that a
/// supervisor restarts it (or a standby has taken over).
fn storage_verdict(failure: Option<Arc<StateFileError>>) -> Result<(), String> {
    match failure {
        Some(error) => Err(failed_to_save(&error)),
        None => Ok(()),
    }
}

fn failed_to_save(error: &StateFileError) -> String {
    format!("stopped serving: the node's state could not be saved: {error}")
}
