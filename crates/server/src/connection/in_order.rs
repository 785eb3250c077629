//! One connection's answers to requests that do not wait (`R`, `K`, `V`,
//! `Q`), in request order for each op and key (docs/protocol.md,
//! "Pipelining and matching"): a client matches an answer to its oldest
//! pending request of that op and key. A request the node answers later
//! (a Raft leader commits a release, or confirms its lead for a query)
//! opens a line for its op and key; an answer of the same op and key that
//! is known at once (`N R k` for a token not held, an `E`, an `M`) waits in
//! that line until every answer before it is written.

use std::collections::VecDeque;

use baton_core::{FastMap, Key};
use baton_proto::{Op, Response};

type LineKey = (Op, Vec<u8>);

/// The open lines: per op and key, the answers in request order, `None`
/// for one the node has not given yet.
#[derive(Debug, Default)]
pub(crate) struct InOrder {
    lines: FastMap<LineKey, VecDeque<Option<Response>>>,
    /// Answers kept in the lines, for the connection's bound on them.
    kept: usize,
    /// The line an answer that came later was put in, to write from.
    ready: Option<LineKey>,
}

/// Whether answers of `op` are kept in request order: acquires and watches
/// wait, and their answers may overtake each other (a client keeps one of
/// a key in flight); `S` and `U` are always answered at once.
fn in_request_order(op: Op) -> bool {
    matches!(op, Op::Release | Op::Renew | Op::SetValue | Op::Query)
}

fn line_key(response: &Response) -> Option<LineKey> {
    let op = response.op()?;
    in_request_order(op).then(|| (op, response.key().unwrap_or_default().to_vec()))
}

impl InOrder {
    /// The answer to a request of `op` on `key` comes later.
    pub(crate) fn later(&mut self, op: Op, key: &Key) {
        if in_request_order(op) {
            let line = self.lines.entry((op, key.as_bytes().to_vec()));
            line.or_default().push_back(None);
            self.kept += 1;
        }
    }

    /// Keeps `response`, known at once, behind the answers still to come
    /// in its line; false when none is to come, to write it now.
    pub(crate) fn keeps(&mut self, response: &Response) -> bool {
        if self.lines.is_empty() {
            return false;
        }
        let Some(key) = line_key(response) else {
            return false;
        };
        let Some(line) = self.lines.get_mut(&key) else {
            return false;
        };
        line.push_back(Some(response.clone()));
        self.kept += 1;
        true
    }

    /// An answer the node gave later: `Some` to write it now (not in a
    /// line), else it took its place in its line, and [`InOrder::next_ready`]
    /// gives what may now be written.
    pub(crate) fn arrived(&mut self, response: Response) -> Option<Response> {
        let Some(key) = line_key(&response) else {
            return Some(response);
        };
        let Some(line) = self.lines.get_mut(&key) else {
            return Some(response);
        };
        let Some(place) = line.iter_mut().find(|answer| answer.is_none()) else {
            // More answers than requests: never, but then it goes as it is.
            return Some(response);
        };
        *place = Some(response);
        self.ready = Some(key);
        None
    }

    /// The next answer of the line an answer last came to, while the
    /// answers at its head are all known.
    pub(crate) fn next_ready(&mut self) -> Option<Response> {
        let key = self.ready.as_ref()?;
        let line = self.lines.get_mut(key)?;
        if let Some(Some(_)) = line.front() {
            self.kept -= 1;
            let answer = line.pop_front().flatten();
            if line.is_empty() {
                self.lines.remove(key);
                self.ready = None;
            }
            return answer;
        }
        self.ready = None;
        None
    }

    /// Answers to come or kept: bounded with the connection's pending
    /// requests (`--max-pending`).
    pub(crate) fn kept(&self) -> usize {
        self.kept
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;

    fn key(k: &str) -> Key {
        Key::new(k.as_bytes()).unwrap()
    }

    fn released(k: &str) -> Response {
        Response::Released { key: key(k) }
    }

    fn not_held(k: &str) -> Response {
        Response::NotHeld {
            op: Op::Release,
            key: key(k),
        }
    }

    fn drain(order: &mut InOrder) -> Vec<Response> {
        std::iter::from_fn(|| order.next_ready()).collect()
    }

    #[test]
    fn an_answer_known_at_once_waits_for_the_one_to_come_before_it() {
        let mut order = InOrder::default();
        order.later(Op::Release, &key("k"));
        assert!(order.keeps(&not_held("k")));
        // Other keys and other ops are not held back.
        assert!(!order.keeps(&not_held("j")));
        assert!(!order.keeps(&Response::Renewed { key: key("k") }));
        assert_eq!(order.kept(), 2);

        assert_eq!(order.arrived(released("k")), None);
        assert_eq!(drain(&mut order), vec![released("k"), not_held("k")]);
        assert_eq!(order.kept(), 0);
        assert!(!order.keeps(&not_held("k")), "the line is closed");
    }

    #[test]
    fn answers_that_come_later_go_out_in_request_order() {
        let mut order = InOrder::default();
        order.later(Op::Release, &key("k"));
        assert!(order.keeps(&not_held("k")));
        order.later(Op::Release, &key("k"));
        assert_eq!(order.arrived(released("k")), None);
        assert_eq!(drain(&mut order), vec![released("k"), not_held("k")]);
        // The third is still to come: a fourth known at once waits for it.
        assert!(order.keeps(&not_held("k")));
        assert_eq!(order.arrived(released("k")), None);
        assert_eq!(drain(&mut order), vec![released("k"), not_held("k")]);
        assert_eq!(order.kept(), 0);
    }

    #[test]
    fn acquires_watches_and_answers_without_a_line_pass() {
        let mut order = InOrder::default();
        order.later(Op::Acquire, &key("k"));
        order.later(Op::Watch, &key("k"));
        assert_eq!(order.kept(), 0);
        let timed_out = Response::TimedOut { key: key("k") };
        assert!(!order.keeps(&timed_out));
        assert_eq!(order.arrived(timed_out.clone()), Some(timed_out));
        assert_eq!(order.arrived(released("k")), Some(released("k")));
        // Also while another op's line is open.
        order.later(Op::Release, &key("k"));
        let moved = Response::Moved {
            op: Op::Watch,
            key: key("k"),
            addr: None,
        };
        assert_eq!(order.arrived(moved.clone()), Some(moved));
    }
}
