//! `baton status`: every node of `--servers` asked for its `S`, shown as a
//! table (or JSON), each node that could not be asked named with its own
//! reason: a refused connection, a TLS failure, refused credentials, a
//! node that takes connections but does not answer.

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

/// Every node's answer, and the exit code when none could be asked.
/// Each address is asked by a client of its own, at once, so each node
/// that cannot be asked is named with its own reason (a client of them
/// all only knows that none was usable). An error of the command line
/// itself (an address, a TLS file) ends it.
async fn ask(
    builder: ClientBuilder,
    servers: &[String],
) -> Result<(Vec<NodeStatus>, Option<Exit>), Error> {
    let addrs = crate::unreachable::unique(servers);
    if addrs.is_empty() {
        return Err(Error::NoAddress);
    }
    let asks = addrs.into_iter().map(|addr| {
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
    let mut nodes = futures_util::future::join_all(asks).await;
    let exits: Vec<Exit> = nodes
        .iter()
        .filter_map(|node| node.status.as_ref().err().map(Exit::of))
        .collect();
    let ends_it =
        |err: &Error| Exit::of(err) == Exit::Usage || matches!(err, Error::TlsConfig { .. });
    if let Some(at) = nodes
        .iter()
        .position(|node| node.status.as_ref().is_err_and(ends_it))
    {
        nodes.swap_remove(at).status?;
    }
    let none_asked = (exits.len() == nodes.len()).then(|| none_asked(&nodes, &exits));
    Ok((nodes, none_asked))
}

/// The exit code when no node could be asked, as the client gives it to
/// other commands: 8 when every node reached refused for credentials,
/// the one code every node failed with, else 4.
fn none_asked(nodes: &[NodeStatus], exits: &[Exit]) -> Exit {
    let reached: Vec<Exit> = nodes
        .iter()
        .filter_map(|node| match &node.status {
            Err(Error::NoServer) | Ok(_) => None,
            Err(err) => Some(Exit::of(err)),
        })
        .collect();
    if !reached.is_empty() && reached.iter().all(|e| *e == Exit::AuthFailed) {
        return Exit::AuthFailed;
    }
    match exits {
        [first, rest @ ..] if rest.iter().all(|e| e == first) => *first,
        _ => Exit::NoServer,
    }
}
