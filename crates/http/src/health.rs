//! `GET /health`: is this node doing its job?
//!
//! | state | code | `status` |
//! |---|---|---|
//! | single node, priority active, Raft leader (serving) | 200 | `serving` |
//! | priority standby or Raft follower that knows the serving node | 200 | `standby` |
//! | standby or follower that knows no serving node | 503 | `unavailable` |
//! | Raft candidate: an election, or a leader cut off from its majority | 503 | `unavailable` |
//! | Raft follower that has not heard its leader for two election timeouts | 503 | `unavailable` |
//! | the node's state could no longer be saved (it is stopping) | 503 | `unavailable` |
//! | a Raft node removed from the membership (`LockNode::health_issue`) | 503 | `unavailable` |
//! | a priority node barred by peers that refuse its link (`LockNode::health_issue`) | 503 | `unavailable` |
//!
//! The body, in every case: `{"status", "reason" (503 only), "role",
//! "mode", "self", "active" (or null), "term" (Raft only)}`.

use axum::http::StatusCode;
use baton_proto::Role;
use baton_server::NodeStatus;
use serde::Serialize;

/// The JSON body of `/health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HealthBody {
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub role: &'static str,
    pub mode: &'static str,
    #[serde(rename = "self")]
    pub self_addr: String,
    pub active: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub term: Option<u64>,
    /// The node's release.
    pub version: &'static str,
}

/// Whether a node in `role` serves clients itself.
pub fn serves(role: Role) -> bool {
    matches!(role, Role::Single | Role::Active | Role::Leader)
}

/// The serving node as this node knows it: itself when it serves.
pub fn active_of(status: &NodeStatus, self_addr: &str) -> Option<String> {
    if serves(status.role) {
        Some(self_addr.to_string())
    } else {
        status.active.clone()
    }
}

/// The term a Raft node reports in its extra `S` fields.
pub fn term_of(status: &NodeStatus) -> Option<u64> {
    status
        .extra
        .iter()
        .find(|(name, _)| name == "term")
        .and_then(|(_, value)| value.parse().ok())
}

/// The answer to `/health` for a node in `status` (see the module doc).
pub fn assess(
    status: &NodeStatus,
    self_addr: &str,
    issue: Option<&str>,
    storage_failure: Option<&str>,
) -> (StatusCode, HealthBody) {
    let active = active_of(status, self_addr);
    let reason = if let Some(failure) = storage_failure {
        Some(format!("storage failed: {failure}"))
    } else if let Some(issue) = issue {
        Some(issue.to_string())
    } else if status.role == Role::Candidate {
        Some("no leader: an election is under way or no majority answers".to_string())
    } else if active.is_none() {
        Some("no serving node known".to_string())
    } else {
        None
    };
    let status_word = match (&reason, serves(status.role)) {
        (Some(_), _) => "unavailable",
        (None, true) => "serving",
        (None, false) => "standby",
    };
    let code = if reason.is_some() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    let body = HealthBody {
        status: status_word,
        reason,
        role: status.role.as_str(),
        mode: status.mode.as_str(),
        self_addr: self_addr.to_string(),
        active,
        term: term_of(status),
        version: baton_server::NODE_VERSION,
    };
    (code, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_proto::Mode;

    fn status(role: Role, mode: Mode, active: Option<&str>) -> NodeStatus {
        NodeStatus {
            role,
            mode,
            active: active.map(str::to_string),
            token: 1,
            locks: 0,
            waiters: 0,
            extra: vec![("term".into(), "4".into())],
        }
    }

    #[test]
    fn each_state_has_its_code() {
        let me = "10.0.0.1:7411";
        let other = Some("10.0.0.2:7411");
        let cases = [
            (
                status(Role::Single, Mode::Single, None),
                None,
                200,
                "serving",
            ),
            (
                status(Role::Active, Mode::Priority, None),
                None,
                200,
                "serving",
            ),
            (status(Role::Leader, Mode::Raft, None), None, 200, "serving"),
            (
                status(Role::Standby, Mode::Priority, other),
                None,
                200,
                "standby",
            ),
            (
                status(Role::Follower, Mode::Raft, other),
                None,
                200,
                "standby",
            ),
            (
                status(Role::Standby, Mode::Priority, None),
                None,
                503,
                "unavailable",
            ),
            (
                status(Role::Follower, Mode::Raft, None),
                None,
                503,
                "unavailable",
            ),
            (
                status(Role::Candidate, Mode::Raft, other),
                None,
                503,
                "unavailable",
            ),
            (
                status(Role::Single, Mode::Single, None),
                Some("disk full"),
                503,
                "unavailable",
            ),
        ];
        for (s, failure, code, word) in cases {
            let (got, body) = assess(&s, me, None, failure);
            assert_eq!(got.as_u16(), code, "{s:?} {failure:?}");
            assert_eq!(body.status, word);
            assert_eq!(body.reason.is_some(), code == 503);
        }
        let heard_nothing = Some("the leader has not been heard from");
        let (code, _) = assess(
            &status(Role::Follower, Mode::Raft, other),
            me,
            heard_nothing,
            None,
        );
        assert_eq!(code.as_u16(), 503, "a follower that hears no leader");
        let (_, body) = assess(&status(Role::Leader, Mode::Raft, None), me, None, None);
        assert_eq!(body.active.as_deref(), Some(me));
        assert_eq!(body.term, Some(4));
    }
}
