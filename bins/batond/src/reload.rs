//! SIGHUP: reads the node's reloadable files again (the `--auth-file`
//! users, the TLS certificate, key and client CA). Each thing reloads on its own; one
//! that fails keeps what it had and says why in one log line.

use std::sync::Arc;

use baton_server::{Auth, ServerTls};

/// Something SIGHUP reloads.
pub trait Reload: Send + Sync + 'static {
    /// What it is, for the log: "auth file /etc/baton/users.toml".
    fn what(&self) -> String;
    /// Reloads; `Ok` says what is in place now, `Err` why the old stays.
    fn reload(&self) -> Result<String, String>;
}

impl Reload for Auth {
    fn what(&self) -> String {
        format!("auth file {}", self.path().display())
    }

    fn reload(&self) -> Result<String, String> {
        Auth::reload(self)
            .map(|users| format!("{users} users"))
            .map_err(|e| e.problem)
    }
}

impl Reload for ServerTls {
    fn what(&self) -> String {
        format!("TLS certificate {}", self.paths().cert.display())
    }

    fn reload(&self) -> Result<String, String> {
        ServerTls::reload(self)
            .map(|()| "in place for new connections".to_string())
            // The words an operator (and the tests) look for in the log.
            .map_err(|e| format!("TLS reload failed: {e}"))
    }
}

/// Installs the SIGHUP handler when there is anything to reload (without,
/// SIGHUP keeps its default effect), and reloads every item on each one.
/// Called before the node announces itself, so no SIGHUP is missed.
pub fn on_sighup(items: Vec<Arc<dyn Reload>>) -> std::io::Result<()> {
    if items.is_empty() {
        return Ok(());
    }
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangup = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            for item in &items {
                // File reads are small and bounded; off the async threads
                // anyway, so a slow disk stalls no connection.
                let item = Arc::clone(item);
                let done = tokio::task::spawn_blocking(move || (item.what(), item.reload())).await;
                match done {
                    Ok((what, Ok(now))) => tracing::info!("reloaded {what}: {now}"),
                    Ok((what, Err(why))) => {
                        tracing::warn!("reload of {what} failed, keeping the previous one: {why}")
                    }
                    Err(error) => tracing::warn!(%error, "reload task failed"),
                }
            }
        }
    });
    Ok(())
}
