//! Throwaway PostgreSQL and MariaDB servers for the fencing tests, from
//! Debian's packages (`postgresql`, `mariadb-server`): each in its own temp
//! directory, on a free loopback port, killed on drop.
//!
//! A server that is not installed gives `None` with a line saying what to
//! install, so a developer without it can still run the rest; under CI
//! (`CI=true`) it panics instead, so that CI never passes without having
//! run against the real servers.

use std::fs::File;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::binary::run_or_panic;
use crate::port::free_addr;

/// How long a server gets to start answering: generous, CI's machine is
/// small and shared.
const START_BOUND: Duration = Duration::from_secs(60);

/// One database server process; killed, and its directory removed, on drop.
#[derive(Debug)]
pub struct DbServer {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
    // Dropped after the child is killed (fields drop in order).
    _dir: TempDir,
}

impl DbServer {
    /// A PostgreSQL server, user `postgres` with trust authentication,
    /// database `postgres`. As root it runs as the `postgres` user, since
    /// PostgreSQL refuses to run as root.
    pub fn postgres() -> Option<DbServer> {
        let (Some(initdb), Some(postgres)) = (postgres_bin("initdb"), postgres_bin("postgres"))
        else {
            return missing("PostgreSQL (initdb, postgres)", "postgresql");
        };
        let user = is_root().then(postgres_user);
        let dir = temp_dir("baton-pg-");
        if let Some((uid, gid)) = user {
            if let Err(e) = std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)) {
                panic!("cannot give {} to postgres: {e}", dir.path().display());
            }
        }
        let data = dir.path().join("data");
        let mut init = Command::new(initdb);
        init.arg("-D").arg(&data);
        init.args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"]);
        run_or_panic(as_user(&mut init, user), "initdb");
        let addr = free_addr();
        let mut cmd = Command::new(postgres);
        cmd.arg("-D").arg(&data).arg("-k").arg(dir.path());
        cmd.args([
            "-p",
            &addr.port().to_string(),
            "-c",
            "listen_addresses=127.0.0.1",
        ]);
        cmd.args(["-c", "fsync=off", "-c", "synchronous_commit=off"]);
        cmd.args(["-c", "full_page_writes=off"]);
        as_user(&mut cmd, user);
        Some(Self::spawn(cmd, dir, addr, "ready to accept connections"))
    }

    /// A MariaDB server: `root` without a password on 127.0.0.1, database
    /// `test`.
    pub fn mariadb() -> Option<DbServer> {
        let (Some(mariadbd), Some(install)) = (
            which("mariadbd", &["/usr/sbin", "/usr/bin"]),
            which("mariadb-install-db", &["/usr/bin"]),
        ) else {
            return missing("MariaDB (mariadbd, mariadb-install-db)", "mariadb-server");
        };
        // As root, mariadbd must be told to stay root: its files are root's.
        let as_root: &[&str] = if is_root() { &["--user=root"] } else { &[] };
        let dir = temp_dir("baton-mariadb-");
        let data = dir.path().join("data");
        let mut init = Command::new(install);
        init.arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()));
        init.args(as_root)
            .arg("--auth-root-authentication-method=normal");
        run_or_panic(&mut init, "mariadb-install-db");
        let addr = free_addr();
        let mut cmd = Command::new(mariadbd);
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()));
        cmd.arg(format!("--socket={}", dir.path().join("sock").display()));
        cmd.arg(format!("--pid-file={}", dir.path().join("pid").display()));
        cmd.arg(format!("--port={}", addr.port())).args(as_root);
        cmd.args([
            "--bind-address=127.0.0.1",
            "--skip-log-bin",
            "--skip-name-resolve",
        ]);
        cmd.arg("--innodb-buffer-pool-size=16M");
        Some(Self::spawn(cmd, dir, addr, "ready for connections"))
    }

    fn spawn(mut cmd: Command, dir: TempDir, addr: SocketAddr, ready: &str) -> DbServer {
        let log = dir.path().join("server.log");
        let out = match File::create(&log) {
            Ok(f) => f,
            Err(e) => panic!("cannot create {}: {e}", log.display()),
        };
        let err = out.try_clone().unwrap_or_else(|e| panic!("log file: {e}"));
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let mut server = DbServer {
            child,
            addr,
            log,
            _dir: dir,
        };
        server.wait_ready(ready);
        server
    }

    fn wait_ready(&mut self, ready: &str) {
        let end = Instant::now() + START_BOUND;
        loop {
            let logged = std::fs::read_to_string(&self.log).unwrap_or_default();
            if logged.contains(ready) && TcpStream::connect(self.addr).is_ok() {
                return;
            }
            let exited = matches!(self.child.try_wait(), Ok(Some(_)));
            if exited || Instant::now() > end {
                panic!(
                    "the database server did not start on {}:\n{logged}",
                    self.addr
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Its loopback address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A PostgreSQL URL (`postgres://postgres@addr/postgres`).
    pub fn postgres_url(&self) -> String {
        format!("postgres://postgres@{}/postgres", self.addr)
    }

    /// A MySQL URL (`mysql://root@addr/test`).
    pub fn mysql_url(&self) -> String {
        format!("mysql://root@{}/test", self.addr)
    }

    /// The end of the server's log, for failure messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for DbServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn missing(what: &str, package: &str) -> Option<DbServer> {
    let message = format!("{what} not found: apt-get install {package} (.ci/run does)");
    let ci = std::env::var("CI").unwrap_or_default().to_ascii_lowercase();
    if matches!(ci.as_str(), "1" | "true" | "yes") {
        panic!("{message}");
    }
    eprintln!("skipped: {message}");
    None
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The `postgres` user's uid and gid (the package creates it).
fn postgres_user() -> (u32, u32) {
    match nix::unistd::User::from_name("postgres") {
        Ok(Some(user)) => (user.uid.as_raw(), user.gid.as_raw()),
        _ => panic!("running as root and there is no postgres user to run PostgreSQL as"),
    }
}

fn as_user(cmd: &mut Command, user: Option<(u32, u32)>) -> &mut Command {
    if let Some((uid, gid)) = user {
        cmd.uid(uid).gid(gid);
    }
    cmd
}

/// `name` from the newest `/usr/lib/postgresql/<version>/bin`, else PATH.
fn postgres_bin(name: &str) -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin").join(name);
            bin.is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    match versions.pop() {
        Some((_, bin)) => Some(bin),
        None => which(name, &[]),
    }
}

/// `name` in `dirs`, then in PATH.
fn which(name: &str, dirs: &[&str]) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    dirs.iter()
        .map(|d| Path::new(d).join(name))
        .chain(std::env::split_paths(&path).map(|d| d.join(name)))
        .find(|p| p.is_file())
}

fn temp_dir(prefix: &str) -> TempDir {
    match tempfile::Builder::new().prefix(prefix).tempdir() {
        Ok(dir) => dir,
        Err(e) => panic!("cannot create a temp dir: {e}"),
    }
}
