//! `baton`: the command-line client. Takes and gives back locks for shell
//! scripts, shows the cluster's status, runs commands under a lock, and
//! makes cluster keys.

mod cli;
mod credentials;
mod exit;
mod inspect;
mod keygen;
mod run;
mod seconds;
mod status_table;
mod tls;

use std::process::ExitCode;

use baton_client::{Client, Error, NodeStatus};
use clap::Parser;

use crate::cli::{Cli, Command};
use crate::exit::Exit;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // No node and no runtime needed: a key is made here.
    if let Command::Keygen = cli.command {
        return keygen::keygen();
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

/// Prints `err` as one line and returns its exit code.
pub(crate) fn fail(err: &Error) -> ExitCode {
    eprintln!("baton: {err}");
    Exit::of(err).code()
}

async fn dispatch(cli: Cli) -> ExitCode {
    let servers: Vec<String> = cli
        .servers
        .iter()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect();
    let mut builder = match cli.tls.apply(Client::builder().servers(servers.clone())) {
        Ok(builder) => builder,
        Err(err) => return fail(&err),
    };
    match credentials::credentials(cli.user.as_deref(), cli.secret_file.as_deref()) {
        Ok(Some((user, secret))) => builder = builder.credentials(user, secret),
        Ok(None) => {}
        Err(message) => {
            eprintln!("baton: {message}");
            return Exit::Usage.code();
        }
    }
    let client = builder.build().await;
    if let Command::Status = cli.command {
        return status(client, servers).await;
    }
    let client = match client {
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
        Command::Acquire { key, wait, lease } => client
            .acquire(key.as_encoded_bytes(), wait, lease)
            .await
            .map(|guard| println!("{}", guard.into_token())),
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
            lease,
            command,
        } => return run::run(client, &key, wait, lease, &command).await,
        Command::Inspect { key, json } => {
            return inspect::inspect(client, key.as_encoded_bytes(), json).await
        }
        Command::ForceRelease { key, yes } => {
            return inspect::force_release(client, key.as_encoded_bytes(), yes).await
        }
        Command::Status | Command::Keygen => Ok(()),
    };
    match outcome {
        Ok(()) => Exit::Ok.code(),
        Err(err) => fail(&err),
    }
}

async fn status(client: Result<Client, Error>, servers: Vec<String>) -> ExitCode {
    let nodes = match client {
        Ok(client) => client.status_all().await,
        Err(Error::NoServer) => {
            let mut unique: Vec<String> = Vec::new();
            for addr in servers {
                if !unique.contains(&addr) {
                    unique.push(addr);
                }
            }
            unique
                .into_iter()
                .map(|addr| NodeStatus {
                    addr,
                    status: Err(Error::NoServer),
                })
                .collect()
        }
        Err(err) => return fail(&err),
    };
    print!("{}", status_table::render(&nodes));
    if nodes.iter().any(|node| node.status.is_ok()) {
        Exit::Ok.code()
    } else {
        Exit::NoServer.code()
    }
}
