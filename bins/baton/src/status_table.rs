//! `baton status`: one row per node, unreachable ones included.

use baton_client::{Error, NodeStatus};
use baton_proto::Role;

const HEADER: [&str; 6] = ["ADDRESS", "ROLE", "ACTIVE", "TOKEN", "LOCKS", "WAITERS"];

/// The table as text, columns padded to their widest cell.
pub fn render(nodes: &[NodeStatus]) -> String {
    let mut rows: Vec<[String; 6]> = vec![HEADER.map(str::to_owned)];
    for node in nodes {
        rows.push(match &node.status {
            Ok(s) => [
                node.addr.clone(),
                s.role.as_str().to_owned(),
                s.active.clone().unwrap_or_else(|| "-".to_owned()),
                s.token.to_string(),
                s.locks.to_string(),
                s.waiters.to_string(),
            ],
            Err(err) => [
                node.addr.clone(),
                match err {
                    Error::NoServer => "unreachable",
                    _ => "error",
                }
                .to_owned(),
                "-".to_owned(),
                "-".to_owned(),
                "-".to_owned(),
                "-".to_owned(),
            ],
        });
    }
    pad(&rows)
}

/// Why each node that could not be asked could not: one line each,
/// naming it (a refused connection, a TLS or credentials failure).
pub fn failures(nodes: &[NodeStatus]) -> Vec<String> {
    nodes
        .iter()
        .filter_map(|node| {
            let err = node.status.as_ref().err()?;
            let why = crate::status_json::error_text(&node.addr, err);
            Some(if why.contains(node.addr.as_str()) {
                why
            } else {
                format!("{}: {why}", node.addr)
            })
        })
        .collect()
}

/// A warning when more than one node says it serves (a priority active
/// or a Raft leader): each grants on its own, so locks no longer exclude.
pub fn many_serving(nodes: &[NodeStatus]) -> Option<String> {
    let serving: Vec<&str> = nodes
        .iter()
        .filter(|node| {
            node.status
                .as_ref()
                .is_ok_and(|s| matches!(s.role, Role::Active | Role::Leader))
        })
        .map(|node| node.addr.as_str())
        .collect();
    (serving.len() > 1).then(|| {
        format!(
            "{} nodes serve at once ({}): a split service; check that every node has the same \
             --peers and --cluster-key-file",
            serving.len(),
            serving.join(", ")
        )
    })
}

/// Rows as text, columns padded to their widest cell, two spaces apart.
pub fn pad<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0; N];
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, (cell, width)) in row.iter().zip(widths).enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            line.push_str(&format!("{cell:<width$}"));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_client::{Error, StatusReport};
    use baton_proto::Mode;

    fn node(addr: &str, role: Option<Role>) -> NodeStatus {
        NodeStatus {
            addr: addr.to_owned(),
            status: role
                .map(|role| StatusReport {
                    role,
                    mode: Mode::Priority,
                    self_addr: addr.to_owned(),
                    active: None,
                    token: 1,
                    locks: 0,
                    waiters: 0,
                    extra: Vec::new(),
                })
                .ok_or(Error::NoServer),
        }
    }

    #[test]
    fn two_serving_nodes_are_named() {
        let nodes = [
            node("a:1", Some(Role::Active)),
            node("b:2", Some(Role::Standby)),
            node("c:3", Some(Role::Active)),
        ];
        let line = many_serving(&nodes).expect("two actives");
        assert!(line.contains("2 nodes serve at once (a:1, c:3)"), "{line}");
        let nodes = [
            node("a:1", Some(Role::Leader)),
            node("b:2", Some(Role::Leader)),
        ];
        assert!(many_serving(&nodes).is_some());
    }

    #[test]
    fn one_serving_node_is_no_warning() {
        let nodes = [
            node("a:1", Some(Role::Active)),
            node("b:2", Some(Role::Standby)),
            node("c:3", None),
        ];
        assert_eq!(many_serving(&nodes), None);
        assert_eq!(many_serving(&[node("a:1", Some(Role::Single))]), None);
    }
}
