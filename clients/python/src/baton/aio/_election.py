"""Leader election on one key, in the manner of etcd's concurrency package:
campaign (acquire the key with a value, keep-alive on), proclaim (set the
value), leader (query), observe (a watch of the leader), resign (release).
The leader is the key's holder; its fencing token fences what it does."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from .. import _proto as proto
from .. import errors
from .._types import KeyState, Leader
from ._lock import Lock, OnLost
from ._watch import DEFAULT_WATCH_WAIT, Watch

if TYPE_CHECKING:
    from ._client import Client

#: The leader's lease when none is given: a leader that dies leaves the
#: office vacant this long at most (renewed every third of it meanwhile).
DEFAULT_ELECTION_LEASE = 10.0


def leader_of(state: KeyState) -> Optional[Leader]:
    """The leader a key's state shows: its oldest holder, if any."""
    if not state.holders:
        return None
    holder = state.holders[0]
    return Leader(holder.value, holder.token)


class Election:
    """`client.election(name, lease=10)`. Candidates `campaign`; the one
    whose acquire the key grants leads until it resigns or its lease is
    lost (its `Lock.lost` is set and `on_lost` called: stop acting as the
    leader). Anyone may ask for the `leader` or `observe` it."""

    def __init__(self, client: "Client", name: proto.Key, lease: proto.Seconds) -> None:
        self._client = client
        self._raw = proto.key_bytes(name)
        #: The election's key.
        self.name: proto.Key = name
        proto.to_ms(lease, "lease", zero_ok=False)
        self._lease = lease
        self._lock: Optional[Lock] = None

    def __repr__(self) -> str:
        return f"Election(name={self.name!r}, leading={self.lock is not None})"

    @property
    def lock(self) -> Optional[Lock]:
        """This client's grant while it leads (its `token` fences the
        leader's writes), else None."""
        lock = self._lock
        if lock is None or lock.released or lock.is_lost:
            return None
        return lock

    async def campaign(
        self, value: proto.Value, *, wait: proto.Seconds = 0, on_lost: Optional[OnLost] = None
    ) -> Lock:
        """Waits up to `wait` seconds (`0`: as long as the node allows) to
        lead, with `value` proclaimed, and keeps the lease alive. Returns
        the grant (`async with` it to resign on exit). Campaigning while
        leading proclaims `value`. `TimedOut` when the wait ran out."""
        raw_value = proto.value_bytes(value)
        lock = self.lock
        if lock is not None:
            await lock.set_value(raw_value)
            return lock
        lock = await self._client.acquire(
            self.name, wait, self._lease, value=raw_value, keep_alive=True, on_lost=on_lost
        )
        self._lock = lock
        return lock

    async def proclaim(self, value: proto.Value) -> None:
        """Sets the leader's value without a new election. `NotLeader` when
        this client does not lead; `LeaseLost` when its lease turned out lost."""
        raw_value = proto.value_bytes(value)
        lock = self.lock
        if lock is None:
            raise errors.NotLeader(proto.key_text(self._raw))
        await lock.set_value(raw_value)

    async def leader(self) -> Optional[Leader]:
        """The current leader (value and token), None while there is none."""
        return leader_of(await self._client.inspect(self._raw))

    def observe(self, *, wait: proto.Seconds = DEFAULT_WATCH_WAIT) -> "Observation":
        """`async for leader in election.observe():` the leader now, then
        each new leader or new value (None while the office is vacant)."""
        return Observation(Watch(self._client, self._raw, wait, None))

    async def resign(self) -> None:
        """Gives up leading (releases the grant); nothing when not leading."""
        lock, self._lock = self._lock, None
        if lock is None or lock.released:
            return
        try:
            await lock.release()
        except errors.NotHeld:
            pass  # the lease had run out: the office is no longer ours anyway


class Observation:
    """The leaders an `Election` has, one per change (see `observe`)."""

    def __init__(self, watch: Watch) -> None:
        self._watch = watch
        self._started = False
        self._last: Optional[Leader] = None

    def __aiter__(self) -> "Observation":
        return self

    async def __anext__(self) -> Optional[Leader]:
        while True:
            leader = leader_of(await self._watch.__anext__())
            if not self._started or leader != self._last:
                self._started = True
                self._last = leader
                return leader

    def close(self) -> None:
        self._watch.close()

    async def aclose(self) -> None:
        self.close()

    async def __aenter__(self) -> "Observation":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()
