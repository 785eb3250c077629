"""A watch: one key's states, each time its holders or their values change,
as an async iterator. Each step sends `W <key> <wait> <seen>` with the tag
of the last state it gave, so nothing is missed between two steps and
nothing runs between them: a watch the program stops (or cancels while a
step waits) leaves no task and no retry behind. A step follows `M`
redirects and, when its connection breaks or its node stops answering,
is sent again on another connection, like the other requests."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any, Optional

from .. import _proto as proto
from .. import errors
from .._types import KeyState
from ._retry import RETRY_INTERVAL, follow, rejected
from ._slot import Broken, Slot, Unanswered

if TYPE_CHECKING:
    from ._client import Client

log = logging.getLogger("baton")

#: How long one `W` waits on the node before it is sent again: it bounds how
#: long a step the program gave up stays on the node (the protocol cannot
#: take a watch back) and how long a broken path may go unnoticed.
DEFAULT_WATCH_WAIT = 30.0
#: With `wait=0` (the node's maximum), an unchanged answer sooner than half
#: this is early.
EARLY_ANSWER = 2.0
#: A step raises `NoServer` once no node has served it for this long
#: (failovers and reconnects take less).
WATCH_OUTAGE = 30.0
#: How a node refuses a wait above its `--max-wait`: the watch then asks
#: for the node's maximum (`0`), which is shorter than the wait it asked.
WAIT_TOO_LONG = "wait exceeds the maximum"


class Watch:
    """`async for state in client.watch(key):` the key's `KeyState` now
    (unless `seen` was given), then each time its holders or their values
    change (a grant, a release, an expiry, a hand-over, a value set); a
    change of the waiters alone does not count. `wait` is how long one `W`
    waits on the node; a node whose `--max-wait` is shorter is asked for
    its maximum instead. States that come and go
    between two steps are not seen: each step reports the state at its
    answer. Endless: stop with `break`, `aclose()` or by cancelling the
    task. A `W` step raises `NoServer` when no node served it for 30 s
    (the first step, a `Q` when `seen` is not given, gives up as `inspect`
    does), `Rejected` on the node's `E` (too many watches), `Unsupported`
    from a 1.1 node."""

    def __init__(
        self, client: "Client", key: proto.Key, wait: proto.Seconds, seen: Optional[str]
    ) -> None:
        self._client = client
        self._raw = proto.key_bytes(key)
        #: The key, as given to `watch`.
        self.key: proto.Key = key
        self._wait_ms = proto.to_ms(wait, "wait", zero_ok=True)
        self._limit_ms = self._wait_ms
        self._seen: Optional[bytes] = None if seen is None else proto.check_tag(seen)
        self._closed = False
        #: The last state this watch gave.
        self.last: Optional[KeyState] = None

    def __aiter__(self) -> "Watch":
        return self

    async def __anext__(self) -> KeyState:
        if self._closed:
            raise StopAsyncIteration
        if self._seen is None:
            state = await self._client.inspect(self._raw)
        else:
            state = await self._changed(self._seen)
        self._seen = state.tag.encode("ascii")
        self.last = state
        return state

    def close(self) -> None:
        """Ends the iteration: the next step raises `StopAsyncIteration`."""
        self._closed = True

    async def aclose(self) -> None:
        self.close()

    async def __aenter__(self) -> "Watch":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()

    async def _changed(self, seen: bytes) -> KeyState:
        # An unchanged answer long before the wait ran out is not what a
        # node does (except to answer older watches first): the next one
        # waits a little, so a node that does it cannot make a busy loop.
        early = (self._wait_ms / 1000 if self._wait_ms else EARLY_ANSWER) / 2
        while True:
            sent = time.monotonic()
            state = await self._ask(seen)
            if state.tag.encode("ascii") != seen:
                return state
            if time.monotonic() - sent < early:
                await asyncio.sleep(RETRY_INTERVAL)

    async def _ask(self, seen: bytes) -> KeyState:
        """One `W` answered by a node, across redirects and broken
        connections."""
        client = self._client
        pool = await client._started()
        line = proto.watch_line(self._raw, self._wait_ms, seen)
        # With the node's maximum (wait 0) the limit stays that of the wait
        # asked for first: a node refuses only a wait above its maximum.
        limit = self._limit_ms / 1000 + client.request_timeout if self._limit_ms else None
        hops = [0]
        redirect: Optional[Slot] = None
        give_up = time.monotonic() + WATCH_OUTAGE
        quick_failures = 0
        while True:
            slot = redirect or await pool.pick(give_up, ("W", self._raw))
            redirect = None
            if slot is None:
                if client._closing:
                    raise errors.Closed()
                if time.monotonic() >= give_up or pool.tls_failure() is not None:
                    raise pool.no_server()
                continue
            sent = time.monotonic()
            try:
                # A watch of the key already in flight here goes first.
                await slot.take_turn(("W", self._raw), None)
                sent = time.monotonic()
                answer = await slot.call(line, ("W", self._raw), limit)
            except (Broken, Unanswered):
                log.debug("watch of %r lost its connection to %s; sending it again", self.key, slot.addr)
                if time.monotonic() - sent > client.request_timeout:
                    # It was being served until now: a new outage starts.
                    give_up = time.monotonic() + WATCH_OUTAGE
                    quick_failures = 0
                quick_failures += 1
                if quick_failures > 1:
                    # The next connection at once, then a pause between tries.
                    await asyncio.sleep(RETRY_INTERVAL)
                continue
            if answer.kind == "W" and answer.state is not None:
                return answer.state
            if answer.kind == "M":
                if time.monotonic() >= give_up:
                    raise pool.no_server()
                redirect = await follow(pool, answer.addr, hops, give_up)
                continue
            if answer.kind == "E" and self._wait_ms and answer.reason.startswith(WAIT_TOO_LONG):
                self._wait_ms = 0
                line = proto.watch_line(self._raw, self._wait_ms, seen)
                continue
            if answer.kind == "E":
                raise rejected(answer)
            raise errors.UnexpectedAnswer(f"unexpected answer to W: {answer.kind}")
