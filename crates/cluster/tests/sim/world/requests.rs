//! The clients' requests: served by the engine they were sent to, held
//! while it is paused, answered "gone" while it is down.

use baton_cluster::priority::NodeIndex;
use baton_core::{Acquire, AcquireOutcome, Outcome};

use super::super::client::{options, value};
use super::{handle, Answer, Request, World};

impl World {
    pub(super) fn clients_act(&mut self) {
        for c in 0..self.clients.len() {
            if let Some((node, id)) = self.clients[c].abandon(self.now, &mut self.rng) {
                if self.running(node) {
                    self.call(node, None, |engine, _| engine.handle_cancel(id));
                }
            }
            let Some((node, request)) = self.clients[c].next_request(self.now, &mut self.rng)
            else {
                continue;
            };
            if !self.up(node) {
                self.answer(c, node, Answer::Gone);
            } else if self.nodes[node].paused_until.is_some() {
                self.nodes[node].held_requests.push((c, request));
            } else {
                self.serve(node, c, request);
            }
        }
    }

    pub(super) fn answer(&mut self, c: usize, node: NodeIndex, answer: Answer) {
        let now = self.now;
        self.clients[c].on_answer(node, answer, now, &mut self.rng);
    }

    pub(super) fn serve(&mut self, i: NodeIndex, c: usize, request: Request) {
        let key = self.clients[c].key.clone();
        let answer = match request {
            Request::Acquire {
                wait_ms,
                lease_ms,
                shared,
                valued,
            } => {
                let serial = self.clients[c].serial;
                let h = handle(c, serial);
                let k = key.clone();
                let options = options(self.clients[c].kind, shared, valued, serial);
                let result = self.call(i, None, |engine, now| {
                    engine.handle_acquire(Acquire::new(k, wait_ms, lease_ms, options), now, h)
                });
                match result {
                    None => Answer::Gone,
                    Some(Err(to)) => Answer::Redirect(to.serving),
                    Some(Ok(AcquireOutcome::Queued { id })) => Answer::Queued(id),
                    Some(Ok(AcquireOutcome::Refused(refusal))) => {
                        panic!("refused under the default quota: {refusal:?}")
                    }
                    Some(Ok(AcquireOutcome::Granted { token })) => {
                        self.record_grant(i, &key, token);
                        self.answer(c, i, Answer::Granted(token));
                        self.take_custody(c, i);
                        self.log(format!(
                            "client {c} granted {key} token {token} by node {i}"
                        ));
                        return;
                    }
                }
            }
            Request::Release { token } => {
                let result = self.call(i, None, |engine, now| {
                    engine.handle_release(&key, token, now)
                });
                match result {
                    None => Answer::Gone,
                    Some(Err(to)) => Answer::Redirect(to.serving),
                    Some(Ok(Outcome::Released)) => Answer::Released,
                    Some(Ok(_)) => Answer::NotFound,
                }
            }
            Request::SetValue { token } => {
                let v = value(self.clients[c].serial);
                let result = self.call(i, None, |engine, now| {
                    engine.handle_set_value(&key, token, Some(v), now)
                });
                match result {
                    None => Answer::Gone,
                    Some(Err(to)) => Answer::Redirect(to.serving),
                    Some(Ok(Outcome::ValueSet)) => Answer::ValueSet,
                    Some(Ok(_)) => Answer::NotFound,
                }
            }
            Request::Renew { token, lease_ms } => {
                let result = self.call(i, None, |engine, now| {
                    engine.handle_renew(&key, token, lease_ms, now)
                });
                match result {
                    None => Answer::Gone,
                    Some(Err(to)) => Answer::Redirect(to.serving),
                    Some(Ok(Outcome::Renewed)) => {
                        self.answer(c, i, Answer::Renewed);
                        self.take_custody(c, i);
                        return;
                    }
                    Some(Ok(_)) => {
                        self.log(format!(
                            "client {c} lost {key} token {token} (renew at node {i})"
                        ));
                        Answer::NotFound
                    }
                }
            }
        };
        self.answer(c, i, answer);
    }
}
