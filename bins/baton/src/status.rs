//! `baton status`: every node of `--servers` asked for its `S`, shown as a
//! table (or JSON), each node that could not be asked named with its own
//! reason: a refused connection, a TLS failure, refused credentials.

use std::process::ExitCode;

use baton_client::{ClientBuilder, Error, NodeStatus};

use crate::exit::Exit;
use crate::{fail, status_json, status_table};

/// Runs `baton status` over `servers` (already trimmed, maybe repeated).
pub async fn status(builder: ClientBuilder, servers: &[String], json: bool) -> ExitCode {
    let (nodes, none_asked) = match ask(builder, servers).await {
        Ok(asked) => asked,
        Err(err) => return fail(&err),
    };
    if json {
        println!("{}", status_json::render(&nodes));
    } else {
        print!("{}", status_table::render(&nodes));
        // The table has no room for why a node could not be asked.
        for line in status_table::failures(&nodes) {
            eprintln!("baton: {line}");
        }
    }
    if let Some(line) = status_table::many_serving(&nodes) {
        eprintln!("baton: {line}");
        return Exit::ManyServing.code();
    }
    match none_asked {
        None => Exit::Ok.code(),
        Some(exit) => exit.code(),
    }
}

/// Every node's answer, and the exit code when none could be asked: 4, or
/// the code of the one reason every node failed for (8: credentials).
/// One client asks them all; when none can be built, one client per
/// address finds each node's own reason (the shared client only knows
/// that none was usable). An error of the command line itself ends it.
async fn ask(
    builder: ClientBuilder,
    servers: &[String],
) -> Result<(Vec<NodeStatus>, Option<Exit>), Error> {
    let err = match builder.clone().build().await {
        Ok(client) => {
            let nodes = client.status_all().await;
            let _ = client.close().await;
            let none_asked = nodes.iter().all(|n| n.status.is_err());
            return Ok((nodes, none_asked.then_some(Exit::NoServer)));
        }
        Err(err) => err,
    };
    if Exit::of(&err) == Exit::Usage || matches!(err, Error::TlsConfig { .. }) {
        return Err(err);
    }
    let asks = unique(servers).into_iter().map(|addr| {
        let builder = builder.clone().servers([addr.clone()]);
        async move {
            let status = match builder.build().await {
                Ok(client) => {
                    let mut nodes = client.status_all().await;
                    let _ = client.close().await;
                    nodes.pop().map_or(Err(Error::NoServer), |node| node.status)
                }
                Err(err) => Err(err),
            };
            NodeStatus { addr, status }
        }
    });
    let nodes = futures_util::future::join_all(asks).await;
    let exit = match err {
        Error::NoServer => Exit::NoServer,
        other => Exit::of(&other),
    };
    Ok((nodes, Some(exit)))
}

/// The addresses in their order, each once.
fn unique(servers: &[String]) -> Vec<String> {
    let mut unique: Vec<String> = Vec::new();
    for addr in servers {
        if !unique.contains(addr) {
            unique.push(addr.clone());
        }
    }
    unique
}
