//! Which requests need protocol 1.2, and finding a connection whose node
//! speaks it. A 1.1 node answers a 1.2 request with `E`, some (unknown
//! ops) with an `E ? ?` that matches no request; asking a node that says
//! (in its `S` answer) it speaks 1.1 only is refused before sending.

use std::sync::Arc;

use baton_proto::{Request, StatusReport};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::slot::Slot;

/// Whether an `S` answer says the node speaks protocol 1.2 or later.
pub(crate) fn speaks_12(report: &StatusReport) -> bool {
    let version = report
        .extra
        .iter()
        .find(|(name, _)| name == "protocol")
        .map(|(_, version)| version.as_str());
    let Some((major, minor)) = version.and_then(|v| v.split_once('.')) else {
        return false;
    };
    match (major.parse::<u32>(), minor.parse::<u32>()) {
        (Ok(major), Ok(minor)) => (major, minor) >= (1, 2),
        _ => false,
    }
}

/// What in `req` needs protocol 1.2, if anything.
pub(crate) fn needs_12(req: &Request) -> Option<&'static str> {
    match req {
        Request::Acquire { options, .. } if !options.is_plain() => Some("an acquire with options"),
        Request::SetValue { .. } => Some("setting a value"),
        Request::Watch { .. } => Some("a watch"),
        _ => None,
    }
}

impl Client {
    /// The connection to send a request on: `slot`, unless the request
    /// needs protocol 1.2 (for `what`, from [`needs_12`]) and `slot`'s node
    /// speaks 1.1 only; then another usable connection whose node speaks
    /// 1.2 (not for a redirect: the node named is the one to ask), or
    /// [`Error::Unsupported`].
    pub(crate) fn slot_for_request(
        &self,
        slot: Arc<Slot>,
        what: Option<&'static str>,
        redirected: bool,
    ) -> Result<Arc<Slot>> {
        let Some(what) = what else {
            return Ok(slot);
        };
        // A connection not up yet has no answer to go by: it is tried.
        if !slot.is_usable() || slot.speaks_12() {
            return Ok(slot);
        }
        let other = (!redirected)
            .then(|| self.pool.pick_now_speaking_12())
            .flatten();
        other.ok_or_else(|| Error::Unsupported {
            addr: slot.addr.clone(),
            what,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(extra: &[(&str, &str)]) -> StatusReport {
        StatusReport {
            role: baton_proto::Role::Single,
            mode: baton_proto::Mode::Single,
            self_addr: "127.0.0.1:1".into(),
            active: None,
            token: 0,
            locks: 0,
            waiters: 0,
            extra: extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    #[test]
    fn a_node_speaks_12_only_when_it_says_so() {
        assert!(!speaks_12(&status(&[("version", "0.1.0")])));
        assert!(!speaks_12(&status(&[("protocol", "1.1")])));
        assert!(!speaks_12(&status(&[("protocol", "x")])));
        assert!(speaks_12(&status(&[("protocol", "1.2")])));
        assert!(speaks_12(&status(&[("protocol", "1.10")])));
        assert!(speaks_12(&status(&[("protocol", "2.0")])));
    }
}
