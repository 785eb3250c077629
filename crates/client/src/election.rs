//! Leader election in the manner of etcd's concurrency package, on one
//! key: campaigning is acquiring it with a value and keeping the lease
//! alive, the leader is its holder, proclaiming sets the holder's value,
//! observing is watching the key, resigning is releasing it.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use baton_core::{HolderValue, Key, KeyState, Token};
use futures_util::{Stream, StreamExt};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::guard::Guard;
use crate::key_state::KeyStateExt;
use crate::watch::Watch;

/// An election: candidates campaign for its key, one at a time leads.
/// Made by [`Client::election`]; the election's name is its key.
///
/// ```no_run
/// # async fn demo(client: baton_client::Client) -> baton_client::Result<()> {
/// # use std::time::Duration;
/// let election = client.election("scheduler")?;
/// // Waits until this process leads; the lease is kept alive meanwhile.
/// let leadership = election.campaign("10.0.0.7:8080", Duration::from_secs(15)).await?;
/// tokio::select! {
///     () = async { /* lead */ } => {}
///     lost = leadership.lost() => return Err(lost),
/// }
/// leadership.resign().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Election {
    client: Client,
    key: Key,
}

/// Who leads an election: the token of the leader's grant (its fencing
/// token) and the value it campaigned with or proclaimed last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// The leader's fencing token: a later leader always has a greater one.
    pub token: Token,
    /// The leader's value; `None` if the key was taken without one.
    pub value: Option<HolderValue>,
}

impl Leader {
    /// The leader of a key in `state`: its oldest holder.
    fn of(state: &KeyState) -> Option<Leader> {
        state.holders().into_iter().next().map(|holder| Leader {
            token: holder.token,
            value: holder.value,
        })
    }
}

impl Client {
    /// The election named `name` (its key: the key rules apply).
    pub fn election(&self, name: impl AsRef<[u8]>) -> Result<Election> {
        Ok(Election {
            client: self.clone(),
            key: Key::new(name.as_ref())?,
        })
    }
}

impl Election {
    /// The election's key.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// Waits until this candidate leads, then keeps its lease alive (see
    /// [`Guard::keep_alive`]): a leader that crashes is followed by the
    /// next candidate at most `lease` later. Candidates are served first
    /// come, first served. The campaign is given up when its future is
    /// dropped.
    pub async fn campaign(&self, value: impl AsRef<[u8]>, lease: Duration) -> Result<Leadership> {
        let value = HolderValue::new(value.as_ref())?;
        loop {
            // A wait of 0 is the node's longest; its end only means "ask again".
            let acquired = self
                .client
                .acquire(&self.key, Duration::ZERO, lease)
                .value(value.as_bytes())
                .await;
            match acquired {
                Ok(mut guard) => {
                    guard.keep_alive();
                    return Ok(Leadership { guard });
                }
                Err(Error::TimedOut { .. }) => continue,
                Err(err) => return Err(err),
            }
        }
    }

    /// The leader now, if any (a linearizable read in a Raft cluster).
    pub async fn leader(&self) -> Result<Option<Leader>> {
        let state = self.client.inspect(&self.key).await?;
        Ok(Leader::of(&state))
    }

    /// A stream of the leaders: the leader now first (`None`: no leader),
    /// then one item each time the leader or its value changes. It ends
    /// after its first error, as a [`Watch`] does.
    pub fn observe(&self) -> Result<Observe> {
        let watch = self.client.watch(&self.key)?;
        Ok(Observe { watch, last: None })
    }
}

/// The stream [`Election::observe`] returns.
pub struct Observe {
    watch: Watch,
    /// The last leader yielded; `None` before the first item.
    last: Option<Option<Leader>>,
}

impl fmt::Debug for Observe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observe")
            .field("key", self.watch.key())
            .field("last", &self.last)
            .finish()
    }
}

impl Stream for Observe {
    type Item = Result<Option<Leader>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            let state = match self.watch.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(state))) => state,
                Poll::Ready(Some(Err(err))) => return Poll::Ready(Some(Err(err))),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            };
            let leader = Leader::of(&state);
            // The key changed without changing its leader (a waiter's
            // shared grant, say): not an item.
            if self.last.as_ref() != Some(&leader) {
                self.last = Some(leader.clone());
                return Poll::Ready(Some(Ok(leader)));
            }
        }
    }
}

/// This candidate leads: it holds the election's key, its lease kept
/// alive. End it with [`Leadership::resign`]; dropping it resigns in the
/// background, as dropping a [`Guard`] releases.
#[derive(Debug)]
pub struct Leadership {
    guard: Guard,
}

impl Leadership {
    /// The leader's fencing token: pass it to what it leads, which refuses
    /// a lower one (see [`Fence`](crate::Fence)).
    pub fn token(&self) -> Token {
        self.guard.token()
    }

    /// The election's key.
    pub fn key(&self) -> &Key {
        self.guard.key()
    }

    /// The value observers see now.
    pub fn value(&self) -> Option<HolderValue> {
        self.guard.value()
    }

    /// Changes the value observers see, staying leader.
    /// [`Error::LeaseLost`] means leadership is lost.
    pub async fn proclaim(&self, value: impl AsRef<[u8]>) -> Result<()> {
        self.guard.set_value(value).await
    }

    /// Whether leadership is known to be lost.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Resolves when leadership is known to be lost (see [`Guard::lost`]):
    /// stop leading then, another candidate may lead already.
    pub async fn lost(&self) -> Error {
        self.guard.lost().await
    }

    /// Steps down: releases the key, so the next candidate leads.
    pub async fn resign(self) -> Result<()> {
        self.guard.release().await
    }

    /// The guard holding the election's key, its keep-alive running.
    pub fn into_guard(self) -> Guard {
        self.guard
    }
}
