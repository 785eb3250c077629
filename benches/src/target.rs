//! The systems the driver can measure. Later targets (Redis, etcd,
//! ZooKeeper) join this enum behind cargo features, each saying how it is
//! started and whether its grants must obey lock semantics.

use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use crate::server::Launch;

/// Where Baton listens unless told otherwise (batond's default).
pub const DEFAULT_BATON_ADDR: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 7411);

/// A system under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    /// A Baton node (`batond`).
    Baton,
    /// The loopback ceiling: a line echo server answering each request with
    /// a response of the same shape and no work at all.
    Echo,
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::Baton => "baton",
            Target::Echo => "echo",
        }
    }

    /// Whether grants must be exclusive with rising tokens. The echo server
    /// grants every acquire at once, so the contended checks do not apply.
    pub fn checks_locks(self) -> bool {
        match self {
            Target::Baton => true,
            Target::Echo => false,
        }
    }

    /// How to reach the target. Baton: an `--addr` already running or a
    /// `batond` to spawn; echo: this binary in its hidden server mode, so
    /// it can be pinned apart from the driver just like a real server.
    pub fn launch(
        self,
        addr: Option<SocketAddr>,
        spawn: Option<&PathBuf>,
    ) -> std::io::Result<Launch> {
        let listen = || vec![OsString::from("--listen"), "127.0.0.1:0".into()];
        Ok(match self {
            Target::Baton => match (spawn, addr) {
                (Some(program), _) => Launch::Spawn {
                    program: program.clone(),
                    args: listen(),
                },
                (None, Some(addr)) => Launch::External(addr),
                (None, None) => Launch::External(DEFAULT_BATON_ADDR),
            },
            Target::Echo => Launch::Spawn {
                program: std::env::current_exe()?,
                args: vec!["--serve-echo".into(), "127.0.0.1:0".into()],
            },
        })
    }
}
