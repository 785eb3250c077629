//! The peer systems as local daemons: Redis, etcd and ZooKeeper, each on a
//! free 127.0.0.1 port with its data in a fresh directory, pinned like
//! Baton, and probed with its own health check before the bench starts.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{sleep, timeout, Instant};

use crate::error::BenchError;
use crate::server::{log_tail, spawn, Server, SpawnSettings};
use baton_tests::port::free_addrs as free_ports;

/// A JVM (ZooKeeper) can take a while to come up on a busy machine.
pub const READY: Duration = Duration::from_secs(60);

/// A peer daemon and where its program is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Daemon {
    /// `durable`: `appendonly yes` with `appendfsync always`.
    Redis {
        program: PathBuf,
        durable: bool,
    },
    Etcd {
        program: PathBuf,
    },
    Zookeeper {
        java: PathBuf,
        classpath: String,
    },
}

impl Daemon {
    fn name(&self) -> &'static str {
        match self {
            Daemon::Redis { durable: false, .. } => "redis",
            Daemon::Redis { durable: true, .. } => "redis-aof",
            Daemon::Etcd { .. } => "etcd",
            Daemon::Zookeeper { .. } => "zookeeper",
        }
    }

    /// The program and its arguments to serve on `addr` with data in `dir`.
    pub fn command(
        &self,
        addr: SocketAddr,
        spare: SocketAddr,
        dir: &Path,
    ) -> std::io::Result<(PathBuf, Vec<OsString>)> {
        let strings = |args: Vec<String>| args.into_iter().map(OsString::from).collect();
        Ok(match self {
            Daemon::Redis { program, durable } => {
                let mut args = vec![
                    "--bind".to_string(),
                    "127.0.0.1".into(),
                    "--port".into(),
                    addr.port().to_string(),
                    "--dir".into(),
                    dir.display().to_string(),
                    "--save".into(),
                    String::new(),
                    "--daemonize".into(),
                    "no".into(),
                    "--loglevel".into(),
                    "warning".into(),
                    "--appendonly".into(),
                ];
                if *durable {
                    args.extend(["yes".into(), "--appendfsync".into(), "always".into()]);
                } else {
                    args.push("no".into());
                }
                (program.clone(), strings(args))
            }
            Daemon::Etcd { program } => {
                let peer = format!("http://{spare}");
                let member = EtcdMember {
                    name: "bench",
                    client: addr,
                    peer: spare,
                    data_dir: dir.join("etcd"),
                    initial_cluster: format!("bench={peer}"),
                };
                (program.clone(), member.args())
            }
            Daemon::Zookeeper { java, classpath } => {
                // clientPortAddress keeps it on loopback; the admin HTTP
                // server would otherwise bind 0.0.0.0:8080.
                let config = format!(
                    "tickTime=2000\ndataDir={}\nclientPort={}\nclientPortAddress=127.0.0.1\n\
                     admin.enableServer=false\nmaxClientCnxns=0\n4lw.commands.whitelist=ruok\n",
                    dir.join("data").display(),
                    addr.port()
                );
                let path = dir.join("zoo.cfg");
                std::fs::write(&path, config)?;
                let args = vec![
                    "-Dzookeeper.admin.enableServer=false".to_string(),
                    "-cp".into(),
                    classpath.clone(),
                    "org.apache.zookeeper.server.ZooKeeperServerMain".into(),
                    path.display().to_string(),
                ];
                (java.clone(), strings(args))
            }
        })
    }

    /// A request and the text its healthy answer contains.
    pub fn probe(&self) -> (&'static [u8], &'static str) {
        match self {
            Daemon::Redis { .. } => (b"PING\r\n", "+PONG"),
            Daemon::Etcd { .. } => (b"GET /health HTTP/1.0\r\n\r\n", "\"health\":\"true\""),
            Daemon::Zookeeper { .. } => (b"ruok", "imok"),
        }
    }
}

/// One etcd member's settings: all on loopback, data in `data_dir`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdMember {
    pub name: &'static str,
    pub client: SocketAddr,
    pub peer: SocketAddr,
    pub data_dir: PathBuf,
    /// `name=http://peer,...` of every member, this one included.
    pub initial_cluster: String,
}

impl EtcdMember {
    pub fn args(&self) -> Vec<OsString> {
        let client = format!("http://{}", self.client);
        let peer = format!("http://{}", self.peer);
        let args = [
            "--name",
            self.name,
            "--data-dir",
            &self.data_dir.display().to_string(),
            "--listen-client-urls",
            &client,
            "--advertise-client-urls",
            &client,
            "--listen-peer-urls",
            &peer,
            "--initial-advertise-peer-urls",
            &peer,
            "--initial-cluster",
            &self.initial_cluster,
            "--initial-cluster-state",
            "new",
            "--logger",
            "zap",
            "--log-level",
            "warn",
        ];
        args.into_iter().map(OsString::from).collect()
    }
}

/// Starts `daemon` on a free port and waits until it answers its probe.
pub async fn start(daemon: &Daemon, settings: &SpawnSettings) -> Result<Server, BenchError> {
    let setup = |what: &str| {
        let what = what.to_string();
        move |source| BenchError::Setup { what, source }
    };
    let ports = free_ports(2).map_err(setup("pick ports"))?;
    let dir = settings.fresh_dir(daemon.name())?;
    let (program, args) = daemon
        .command(ports[0], ports[1], &dir)
        .map_err(setup("write the daemon's configuration"))?;
    let log = dir.join("server.log");
    let spawned = spawn(&program, &args, settings, Some(&log)).await?;
    let server = Server::new(vec![spawned.into_node(ports[0])], 0, Some(dir));
    let (request, healthy) = daemon.probe();
    let deadline = Instant::now() + READY;
    while Instant::now() < deadline {
        if probe(ports[0], request, healthy).await {
            return Ok(server);
        }
        sleep(Duration::from_millis(100)).await;
    }
    let detail = format!(
        "no healthy answer within {READY:?}; log: {}",
        log_tail(&log)
    );
    server.stop().await;
    Err(BenchError::NotReady {
        what: daemon.name().into(),
        detail,
    })
}

/// Sends `request` and reads until the answer contains `healthy`, the
/// peer closes, or a second passes.
pub async fn probe(addr: SocketAddr, request: &[u8], healthy: &str) -> bool {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.ok()?;
        stream.write_all(request).await.ok()?;
        let mut answer = Vec::new();
        let mut buf = [0u8; 512];
        loop {
            let read = stream.read(&mut buf).await.ok()?;
            if read == 0 {
                return Some(false);
            }
            answer.extend_from_slice(&buf[..read]);
            if String::from_utf8_lossy(&answer).contains(healthy) {
                return Some(true);
            }
        }
    };
    matches!(
        timeout(Duration::from_secs(1), exchange).await,
        Ok(Some(true))
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;

    fn args(daemon: &Daemon) -> Vec<String> {
        let addr: SocketAddr = "127.0.0.1:6400".parse().unwrap();
        let spare: SocketAddr = "127.0.0.1:6401".parse().unwrap();
        let dir = std::env::temp_dir().join(format!("baton-bench-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (_, args) = daemon.command(addr, spare, &dir).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        args.into_iter().map(|a| a.into_string().unwrap()).collect()
    }

    #[test]
    fn redis_on_loopback_with_or_without_fsync() {
        let plain = args(&Daemon::Redis {
            program: "redis-server".into(),
            durable: false,
        });
        assert!(plain.windows(2).any(|w| w == ["--bind", "127.0.0.1"]));
        assert!(plain.windows(2).any(|w| w == ["--port", "6400"]));
        assert!(plain.windows(2).any(|w| w == ["--appendonly", "no"]));
        let durable = args(&Daemon::Redis {
            program: "redis-server".into(),
            durable: true,
        });
        assert!(durable.windows(2).any(|w| w == ["--appendfsync", "always"]));
    }

    #[test]
    fn etcd_listens_on_loopback_only() {
        let etcd = args(&Daemon::Etcd {
            program: "etcd".into(),
        });
        for flag in ["--listen-client-urls", "--listen-peer-urls"] {
            let at = etcd.iter().position(|a| a == flag).unwrap();
            assert!(etcd[at + 1].starts_with("http://127.0.0.1:"), "{etcd:?}");
        }
    }

    #[test]
    fn zookeeper_config_keeps_to_loopback() {
        let dir = std::env::temp_dir().join(format!("baton-bench-zk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let daemon = Daemon::Zookeeper {
            java: "java".into(),
            classpath: "zk.jar".into(),
        };
        let addr: SocketAddr = "127.0.0.1:6400".parse().unwrap();
        daemon.command(addr, addr, &dir).unwrap();
        let config = std::fs::read_to_string(dir.join("zoo.cfg")).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(config.contains("clientPortAddress=127.0.0.1\n"), "{config}");
        assert!(config.contains("clientPort=6400\n"), "{config}");
        assert!(config.contains("admin.enableServer=false\n"), "{config}");
    }
}
