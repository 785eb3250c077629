//! `baton`: the command-line client. Takes and gives back locks for shell
//! scripts, shows the cluster's status, runs commands under a lock, and
//! makes cluster keys.

mod admin_http;
mod cli;
mod credentials;
mod elect;
mod exit;
mod grant_flags;
mod inspect;
mod keygen;
mod locks;
mod manual;
mod member;
mod outage;
mod run;
mod seconds;
mod status;
mod status_json;
mod status_table;
mod tls;
mod unreachable;
mod watch;

use std::process::ExitCode;
use std::time::Duration;

use baton_client::{Client, Error};
use clap::Parser;

use crate::admin_http::AdminHttp;
use crate::cli::{Cli, Command, MemberAction};
use crate::exit::Exit;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // No node and no runtime needed: a key, a script or a page is made here.
    match cli.command {
        Command::Keygen => return keygen::keygen(),
        Command::Completions { shell } => return manual::completions(shell),
        Command::Man => return manual::man(),
        _ => {}
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("baton: cannot start: {err}");
            return Exit::Failure.code();
        }
    };
    runtime.block_on(dispatch(cli))
}

/// Prints `err` as one line and returns its exit code. "No server
/// reachable" names each address and why it could not be reached, or says
/// that the nodes take connections but do not answer.
pub(crate) fn fail(err: &Error) -> ExitCode {
    match err {
        Error::NoServer => match unreachable::explain() {
            Some(why) => eprintln!("baton: {why}"),
            // Every node takes connections, yet none answered in time.
            None => eprintln!(
                "baton: no server answered: every address accepts connections, \
                 but no node answered in time (stopped or overloaded?)"
            ),
        },
        // Which nodes could not be reached, when some could not.
        Error::NotServing => match unreachable::explain() {
            Some(why) => eprintln!("baton: {err}; {why}"),
            None => eprintln!("baton: {err}"),
        },
        _ => eprintln!("baton: {err}"),
    }
    Exit::of(err).code()
}

/// The most addresses `--servers` takes: a cluster is a few nodes, and
/// the client keeps a connection to each.
const MAX_SERVERS: usize = 64;

/// `--try`: the shortest wait the protocol carries (1 ms; 0 would mean
/// the node's maximum), so one attempt and no queueing to speak of.
fn wait_or_try(wait: Duration, try_once: bool) -> Duration {
    if try_once {
        Duration::from_millis(1)
    } else {
        wait
    }
}

async fn dispatch(cli: Cli) -> ExitCode {
    let servers: Vec<String> = cli
        .servers
        .iter()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect();
    if servers.len() > MAX_SERVERS {
        eprintln!(
            "baton: --servers lists {} addresses; at most {MAX_SERVERS}",
            servers.len()
        );
        return Exit::Usage.code();
    }
    unreachable::remember(&servers);
    let tls = match cli.tls.config() {
        Ok(tls) => tls,
        Err(err) => return fail(&err),
    };
    let mut builder = match cli.tls.apply(Client::builder().servers(servers.clone())) {
        Ok(builder) => builder,
        Err(err) => return fail(&err),
    };
    let credentials =
        match credentials::credentials(cli.user.as_deref(), cli.secret_file.as_deref()) {
            Ok(credentials) => credentials,
            Err(message) => {
                eprintln!("baton: {message}");
                return Exit::Usage.code();
            }
        };
    if let Some((user, secret)) = &credentials {
        builder = builder.credentials(user, secret);
    }
    if let Command::Locks {
        prefix,
        json,
        limit,
    } = cli.command
    {
        let options = locks::LocksOptions {
            prefix,
            json,
            limit,
        };
        let admin = Admin {
            http: cli.http,
            tls,
            credentials,
        };
        return admin.locks(builder, &options).await;
    }
    if let Command::Member { action } = cli.command {
        let admin = Admin {
            http: cli.http,
            tls,
            credentials,
        };
        return admin.member(builder, action).await;
    }
    if let Command::Status { json } = cli.command {
        return status::status(builder, &servers, json).await;
    }
    let client = match builder.build().await {
        Ok(client) => client,
        Err(err) => return fail(&err),
    };
    let code = command(&client, cli.command).await;
    // Before exiting: a grant that came after its acquire gave up is being
    // given back in the background, and `run`'s guard may still hold a
    // lock on an early return; close finishes both (bounded, 5 s). Its
    // error could only name such a release, already reported by `code`.
    let _ = client.close().await;
    code
}

/// Runs one command other than `status` and returns its exit code.
async fn command(client: &Client, command: Command) -> ExitCode {
    let outcome = match command {
        Command::Acquire {
            key,
            wait,
            try_once,
            lease,
            grant,
        } => {
            let wait = wait_or_try(wait, try_once);
            let acquire = grant.apply(client.acquire(key.as_encoded_bytes(), wait, lease));
            outage::bounded(client, wait, acquire)
                .await
                .map(|guard| println!("{}", guard.into_token()))
        }
        Command::Release { key, token } => client.release(key.as_encoded_bytes(), token).await,
        Command::Renew { key, token, lease } => client
            .renew(key.as_encoded_bytes(), token, lease)
            .await
            // For a one-off renew "lost" is the same fact as for release:
            // there is no live grant with that token.
            .map_err(|err| match err {
                Error::LeaseLost { key, token } => Error::NotHeld { key, token },
                other => other,
            }),
        Command::Run {
            key,
            wait,
            try_once,
            lease,
            grant,
            child_exit_code,
            command,
        } => {
            let options = run::RunOptions {
                key: &key,
                wait: wait_or_try(wait, try_once),
                lease,
                grant,
                child_exit_code,
                command: &command,
            };
            return run::run(client, options).await;
        }
        Command::Inspect { key, json } => {
            return inspect::inspect(client, key.as_encoded_bytes(), json).await
        }
        Command::ForceRelease { key, yes } => {
            return inspect::force_release(client, key.as_encoded_bytes(), yes).await
        }
        Command::Watch { key, json } => {
            return watch::watch(client, key.as_encoded_bytes(), json).await
        }
        Command::Elect {
            name,
            value,
            lease,
            child_exit_code,
            command,
        } => {
            let options = elect::ElectOptions {
                name: &name,
                value: &value,
                lease,
                child_exit_code,
                command: &command,
            };
            return elect::elect(client, options).await;
        }
        Command::Leader { name, json } => {
            return elect::leader(client, name.as_encoded_bytes(), json).await
        }
        Command::Status { .. }
        | Command::Locks { .. }
        | Command::Member { .. }
        | Command::Keygen
        | Command::Completions { .. }
        | Command::Man => Ok(()),
    };
    match outcome {
        Ok(()) => Exit::Ok.code(),
        Err(err) => fail(&err),
    }
}

/// What the admin commands need to reach the HTTP endpoint.
#[derive(Clone)]
struct Admin {
    /// `--http`.
    http: Option<String>,
    tls: Option<baton_client::TlsConfig>,
    credentials: Option<(String, Vec<u8>)>,
}

impl Admin {
    /// The HTTP client: `--http`, or the endpoint a node advertises.
    async fn http(self, builder: baton_client::ClientBuilder) -> Result<AdminHttp, ExitCode> {
        let tls = match self
            .tls
            .as_ref()
            .map(|t| t.rustls_client_config())
            .transpose()
        {
            Ok(tls) => tls,
            Err(err) => return Err(fail(&err)),
        };
        let addr = match self.http {
            Some(addr) => addr,
            None => locks::discover(builder.build().await)
                .await
                .map_err(|(exit, message)| {
                    eprintln!("baton: {message}");
                    exit.code()
                })?,
        };
        let credentials = self
            .credentials
            .as_ref()
            .map(|(user, secret)| (user.as_str(), secret.as_slice()));
        Ok(AdminHttp::new(addr, tls, credentials))
    }

    async fn member(self, builder: baton_client::ClientBuilder, action: MemberAction) -> ExitCode {
        let request = match action {
            MemberAction::List { json } => member::MemberRequest::List { json },
            MemberAction::Add { addr, timeout } => member::MemberRequest::Add { addr, timeout },
            MemberAction::Remove { addr } => member::MemberRequest::Remove { addr },
        };
        let mut again = Rediscovery {
            admin: Admin {
                http: None,
                ..self.clone()
            },
            builder: builder.clone(),
        };
        match self.http(builder).await {
            Ok(http) => member::member(http, &mut again, &request).await,
            Err(code) => code,
        }
    }

    async fn locks(
        self,
        builder: baton_client::ClientBuilder,
        options: &locks::LocksOptions,
    ) -> ExitCode {
        match self.http(builder).await {
            Ok(http) => locks::locks(&http, options).await,
            Err(code) => code,
        }
    }
}

/// After a 421: the serving node's endpoint, found again from `S`.
struct Rediscovery {
    admin: Admin,
    builder: baton_client::ClientBuilder,
}

impl member::Rediscover for Rediscovery {
    async fn endpoint(&mut self, leader: Option<String>) -> Result<AdminHttp, ExitCode> {
        let builder = match leader {
            Some(leader) => self.builder.clone().servers(vec![leader]),
            None => self.builder.clone(),
        };
        self.admin.clone().http(builder).await
    }
}
