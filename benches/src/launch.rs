//! How each target is brought up: a Baton node already running, a `batond`
//! or echo server that announces its port, a three-node Baton cluster, one
//! of the peer daemons on a port picked for it, or three etcd members.

use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use crate::cluster;
use crate::daemons::{self, Daemon};
use crate::error::BenchError;
use crate::etcd_cluster;
use crate::server::{spawn, Node, Server, SpawnSettings};
use crate::target::{ClusterMode, Target};

/// Where Baton listens unless told otherwise (batond's default).
pub const DEFAULT_BATON_ADDR: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 7411);

/// How to reach a target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Launch {
    External(SocketAddr),
    /// A program that prints `listening <addr>` after `--listen 127.0.0.1:0`.
    Announced {
        program: PathBuf,
        args: Vec<OsString>,
    },
    Cluster {
        batond: PathBuf,
        mode: ClusterMode,
        nodes: usize,
    },
    Daemon(Daemon),
    /// Three etcd members (`etcd_cluster`).
    EtcdCluster {
        program: PathBuf,
        members: usize,
    },
}

/// Where the peer programs are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Programs {
    pub batond: Option<PathBuf>,
    pub baton_addr: Option<SocketAddr>,
    pub redis_server: PathBuf,
    pub etcd: PathBuf,
    pub java: PathBuf,
    pub zookeeper_classpath: String,
}

impl Launch {
    /// How to reach `target`, or why it cannot be reached from this build
    /// and these flags.
    pub fn for_target(target: Target, programs: &Programs) -> Result<Self, String> {
        let batond = || {
            programs
                .batond
                .clone()
                .ok_or_else(|| format!("{} needs --spawn PATH_TO_BATOND", target.name()))
        };
        Ok(match target {
            Target::Baton => match (&programs.batond, programs.baton_addr) {
                (Some(program), _) => Launch::Announced {
                    program: program.clone(),
                    args: vec!["--listen".into(), "127.0.0.1:0".into()],
                },
                (None, Some(addr)) => Launch::External(addr),
                (None, None) => Launch::External(DEFAULT_BATON_ADDR),
            },
            Target::BatonPriority => Launch::Cluster {
                batond: batond()?,
                mode: ClusterMode::Priority,
                nodes: 3,
            },
            Target::BatonRaft => Launch::Cluster {
                batond: batond()?,
                mode: ClusterMode::Raft,
                nodes: 3,
            },
            // This same binary in its hidden server mode, so it can be
            // pinned apart from the driver just like a real server.
            Target::Echo => Launch::Announced {
                program: std::env::current_exe()
                    .map_err(|e| format!("cannot find this binary: {e}"))?,
                args: vec!["--serve-echo".into(), "127.0.0.1:0".into()],
            },
            Target::Redis | Target::RedisAof => Launch::Daemon(Daemon::Redis {
                program: programs.redis_server.clone(),
                durable: target == Target::RedisAof,
            }),
            Target::Etcd => Launch::Daemon(Daemon::Etcd {
                program: programs.etcd.clone(),
            }),
            Target::EtcdCluster => Launch::EtcdCluster {
                program: programs.etcd.clone(),
                members: 3,
            },
            Target::Zookeeper => Launch::Daemon(Daemon::Zookeeper {
                java: programs.java.clone(),
                classpath: programs.zookeeper_classpath.clone(),
            }),
        })
    }

    pub async fn start(&self, settings: &SpawnSettings) -> Result<Server, BenchError> {
        match self {
            Launch::External(addr) => {
                if !addr.ip().is_loopback() {
                    return Err(BenchError::NotLoopback(*addr));
                }
                Ok(Server::new(vec![Node::external(*addr)], 0, None))
            }
            Launch::Announced { program, args } => {
                // Set only for scenarios that run on batond alone.
                let args = [args.as_slice(), &settings.batond_args].concat();
                let spawned = spawn(program, &args, settings, None).await?;
                let addr = spawned.announced.ok_or_else(|| BenchError::Startup {
                    program: program.display().to_string(),
                    problem: "no address announced",
                })?;
                Ok(Server::new(vec![spawned.into_node(addr)], 0, None))
            }
            Launch::Cluster {
                batond,
                mode,
                nodes,
            } => cluster::start(batond, *mode, *nodes, settings).await,
            Launch::Daemon(daemon) => daemons::start(daemon, settings).await,
            Launch::EtcdCluster { program, members } => {
                etcd_cluster::start(program, *members, settings).await
            }
        }
    }
}
