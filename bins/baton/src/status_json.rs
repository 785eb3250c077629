//! `baton status --json`: one JSON array, one object per node, with every
//! field of its `S` answer (the extra ones a node adds included, by their
//! own names), or `"error"` for a node that could not be asked.

use baton_client::{Error, NodeStatus, StatusReport};
use serde_json::{json, Map, Value};

/// The array, on one line.
pub fn render(nodes: &[NodeStatus]) -> String {
    let array: Vec<Value> = nodes.iter().map(node).collect();
    Value::Array(array).to_string()
}

fn node(node: &NodeStatus) -> Value {
    match &node.status {
        Ok(report) => fields(&node.addr, report),
        Err(err) => json!({ "addr": node.addr, "error": error_text(&node.addr, err) }),
    }
}

/// Tokens are strings, as on the HTTP endpoint: they pass 2^53, where a
/// JSON number read as a float (`jq`, JavaScript) loses digits.
fn fields(addr: &str, s: &StatusReport) -> Value {
    let mut object = Map::new();
    object.insert("addr".into(), json!(addr));
    object.insert("role".into(), json!(s.role.as_str()));
    object.insert("mode".into(), json!(s.mode.as_str()));
    object.insert("self".into(), json!(s.self_addr));
    object.insert("active".into(), json!(s.active));
    object.insert("token".into(), json!(s.token.to_string()));
    object.insert("locks".into(), json!(s.locks));
    object.insert("waiters".into(), json!(s.waiters));
    for (name, value) in &s.extra {
        // A field named like one above cannot replace it.
        object.entry(name.clone()).or_insert_with(|| json!(value));
    }
    Value::Object(object)
}

/// Why the node could not be asked: the address and the cause when the
/// client only knows it could not connect.
pub fn error_text(addr: &str, err: &Error) -> String {
    match err {
        Error::NoServer => match crate::unreachable::dial(addr) {
            Err(why) => format!("cannot reach {addr}: {why}"),
            // A stopped node: its kernel still takes the connection.
            Ok(()) => "it takes connections but did not answer in time (stopped or overloaded?)"
                .to_owned(),
        },
        other => other.to_string(),
    }
}
