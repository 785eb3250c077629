"""The registered connections and the round-robin over the usable ones: one
connection per address, two when only one address is given, so a single
broken socket never pauses the service."""

from __future__ import annotations

import asyncio
import time
from typing import List, Optional, Set

from .. import _proto as proto
from .. import errors
from ._slot import RECONNECT_INTERVAL, Shared, Slot

#: Redirects may name addresses the client was not given; past this many
#: connections in all, a redirect to a new address is not followed.
MAX_SLOTS = 64
#: Requests a repeat does not change (a renewal sets the same lease end
#: again, a query reads): sent on a second connection as well when the
#: first goes silent, so a frozen node does not hold them for the whole
#: time it takes to be noticed (short keep-alive leases outlive that).
HEDGED_OPS = ("K", "Q")
#: How long `close` waits for the connections' tasks to end.
SHUT_TIME = 1.0
#: Beyond the connect timeout, how long to wait for a dial's outcome to be told.
SETTLE_SLACK = 0.2


class Pool:
    def __init__(self, addrs: List[str], shared: Shared) -> None:
        self.shared = shared
        copies = 2 if len(addrs) == 1 else 1
        self.slots: List[Slot] = [Slot(addr, shared) for addr in addrs for _ in range(copies)]
        self._next = 0

    def __len__(self) -> int:
        return len(self.slots)

    def addresses(self) -> List[str]:
        seen: List[str] = []
        for slot in self.slots:
            if slot.addr not in seen:
                seen.append(slot.addr)
        return seen

    def pick_now(self, key: Optional[proto.MatchKey] = None) -> Optional[Slot]:
        """The next usable connection in round-robin order, preferring one
        that is not at its pending-request limit, then one whose node has not
        been silent (see `Slot.silent`), then (given `key`) one where no
        request of `key` is in flight, so that it need not wait its turn."""
        slots = self.slots
        start = self._next
        self._next += 1
        order = [slots[(start + i) % len(slots)] for i in range(len(slots))]
        usable = [slot for slot in order if slot.usable]
        roomy = [slot for slot in usable if not slot.full] or usable
        if not roomy:
            return None
        return min(roomy, key=lambda slot: (slot.silent, key is not None and slot.in_flight(key)))

    def _other_than(self, slot: Slot) -> Optional[Slot]:
        """A usable connection other than `slot`, not silent, preferably
        to another node."""
        others = [s for s in self.slots if s is not slot and s.usable and not s.silent]
        elsewhere = [s for s in others if s.addr != slot.addr]
        choices = elsewhere or others
        return choices[0] if choices else None

    async def call(
        self, slot: Slot, line: bytes, key: proto.MatchKey, limit: float
    ) -> proto.Response:
        """`slot.call`; a request of `HEDGED_OPS` is also sent on another
        connection once the first has been silent for the probe delay (its
        node may be frozen), counted like the probe's (a connection that
        owed answers already has used part of it): the first answer wins."""
        hedge_after = max(0.0, self.shared.probe_after - slot.silent_for())
        if key[0] not in HEDGED_OPS or limit <= hedge_after:
            return await slot.call(line, key, limit)
        end = time.monotonic() + limit
        first = asyncio.ensure_future(slot.call(line, key, limit))
        done, _ = await asyncio.wait({first}, timeout=hedge_after)
        other = None if done else self._other_than(slot)
        if other is None:
            return await first
        second = asyncio.ensure_future(other.call(line, key, max(0.001, end - time.monotonic())))
        return await _first_answer({first, second})

    def usable_to(self, addr: str) -> Optional[Slot]:
        for slot in self.slots:
            if slot.addr == addr and slot.usable:
                return slot
        return None

    async def pick(
        self, until: Optional[float], key: Optional[proto.MatchKey] = None
    ) -> Optional[Slot]:
        """Like `pick_now`, but waits for a connection to come back: at most
        one reconnect round, and never past `until` (a monotonic time)."""
        end = time.monotonic() + RECONNECT_INTERVAL + self.shared.connect_timeout
        if until is not None:
            end = min(end, until)
        while True:
            slot = self.pick_now(key)
            if slot is not None:
                return slot
            # A TLS mismatch does not heal by waiting for a reconnect.
            if self.tls_failure() is not None or self.shared.closed.is_set():
                return None
            left = end - time.monotonic()
            if left <= 0 or not await self.shared.changed.wait(left):
                return None

    async def reach(self, slot: Slot) -> bool:
        """Whether `slot` is usable, dialling it at once when it is down (a
        redirect names its node) and waiting for that dial, at most the
        connect timeout."""
        failed = slot.failed_dials
        if slot.usable or not slot.dial_now():
            return slot.usable
        end = time.monotonic() + self.shared.connect_timeout + SETTLE_SLACK
        while not slot.usable and slot.failed_dials == failed and not self.shared.closed.is_set():
            left = end - time.monotonic()
            if left <= 0 or not await self.shared.changed.wait(left):
                break
        return slot.usable

    def slot_for(self, addr: str) -> Optional[Slot]:
        """The connection a redirect points at, registering it if the address
        is new (None when the address is not host:port or the pool is full)."""
        known = [slot for slot in self.slots if slot.addr == addr]
        for slot in known:
            if slot.usable:
                return slot
        if known:
            return known[-1]
        if len(self.slots) >= MAX_SLOTS:
            return None
        try:
            slot = Slot(addr, self.shared)
        except errors.InvalidArgument:
            return None
        self.slots.append(slot)
        return slot

    def tls_failure(self) -> Optional[errors.TlsError]:
        """The TLS error, if every connection's last attempt failed for a TLS reason."""
        first = None
        for slot in self.slots:
            if slot.tls_failure is None:
                return None
            if first is None:
                first = errors.TlsError(slot.addr, slot.tls_failure)
        return first

    def no_server(self) -> errors.Error:
        tls = self.tls_failure()
        return tls if tls is not None else errors.NoServer()

    def no_server_at(self, addr: str) -> errors.Error:
        for slot in self.slots:
            if slot.addr == addr and slot.tls_failure is not None:
                return errors.TlsError(addr, slot.tls_failure)
        return errors.NoServer(f"no connection to {addr}")

    def auth_refusal(self) -> Optional[errors.Error]:
        for slot in self.slots:
            if slot.auth_refusal is not None:
                return slot.auth_refusal
        return None

    async def settle(self) -> None:
        """Waits until every connection made its first attempt, bounded by
        the connect timeout (plus a little slack)."""
        end = time.monotonic() + self.shared.connect_timeout + SETTLE_SLACK
        while not all(slot.attempted for slot in self.slots):
            left = end - time.monotonic()
            if left <= 0 or not await self.shared.changed.wait(left):
                return

    def give_up_waits(self) -> None:
        for slot in self.slots:
            slot.give_up_waits()

    def shut_down(self) -> None:
        self.shared.closed.set()
        for slot in self.slots:
            slot.shut_down()

    async def wait_shut(self) -> None:
        """Waits (briefly) for the connections' tasks to end after
        `shut_down`, so that a loop closed next leaves none pending."""
        await asyncio.wait([slot.task for slot in self.slots], timeout=SHUT_TIME)


async def _first_answer(calls: "Set[asyncio.Future[proto.Response]]") -> proto.Response:
    """The first of `calls` to be answered (the others are given up), or
    the last one's error when none is."""
    pending = set(calls)
    error: Optional[BaseException] = None
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for call in done:
                error = call.exception()
                if error is None:
                    return call.result()
        assert error is not None
        raise error
    finally:
        for call in pending:
            call.cancel()
