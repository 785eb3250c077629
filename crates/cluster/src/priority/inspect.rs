//! What a priority node tells an operator beyond `S` (the HTTP endpoint):
//! the peer list with each peer's state as this node sees it.

use baton_core::Millis;
use baton_server::inspect::Member;
use baton_server::Mailbox;

use super::engine::{NodeRole, PriorityNode};

/// Every node of the peer list: the active (this node, or the one it
/// follows), the standbys heard within a failure timeout, `refusing` for
/// a peer that answers but refuses the link (another key or peer list),
/// and `down` for the others.
pub(super) fn members(engine: &PriorityNode<Mailbox>, now: Millis) -> Vec<Member> {
    let me = engine.config().me;
    let active = match engine.role() {
        NodeRole::Active => Some(me),
        _ => engine.redirect_target(),
    };
    engine
        .config()
        .peers
        .iter()
        .enumerate()
        .map(|(i, addr)| {
            let state = if Some(i) == active {
                "active"
            } else if i == me || engine.peer_live(i, now) {
                "standby"
            } else if engine.refuses_link(i, now) {
                "refusing"
            } else {
                "down"
            };
            Member {
                addr: addr.clone(),
                is_self: i == me,
                state,
                voter: true,
                matched: None,
                lag: None,
            }
        })
        .collect()
}
