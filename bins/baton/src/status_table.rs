//! `baton status`: one row per node, unreachable ones included.

use baton_client::NodeStatus;

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
            Err(_) => [
                node.addr.clone(),
                "unreachable".to_owned(),
                "-".to_owned(),
                "-".to_owned(),
                "-".to_owned(),
                "-".to_owned(),
            ],
        });
    }
    pad(&rows)
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
