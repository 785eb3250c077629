"""Sending a request until a node answers it: retries across connections,
`M` redirects followed, and the error for an `E` answer."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Optional

from .. import _proto as proto
from .. import errors
from ._pool import Pool
from ._slot import Broken, Slot, Unanswered

log = logging.getLogger("baton")

#: Pause before asking again when a node answers `M ... -` (no active node yet).
NO_ACTIVE_PAUSE = 0.1
#: Interval between two tries of a request no node answered.
RETRY_INTERVAL = 0.2
#: Consecutive redirects after which the client pauses between hops.
FREE_HOPS = 4
#: What a 1.1 node answers an acquire with 1.2's options.
OPTIONS_REFUSED_BY_1_1 = "too many fields"


def rejected(response: proto.Response, options: bool = False) -> errors.Error:
    """The error for an `E` answer (`options`: to an acquire that carried
    1.2's options, which a 1.1 node counts as extra fields)."""
    key = proto.key_text(response.key)
    if response.reason == "permission denied":
        return errors.PermissionDenied(key)
    if response.reason == "authentication required":
        return errors.AuthenticationRequired()
    if response.reason == proto.UNKNOWN_OP or (options and response.reason == OPTIONS_REFUSED_BY_1_1):
        return errors.Unsupported(response.reason, key)
    return errors.Rejected(response.reason, key)


async def call_retrying(
    pool: Pool, line: bytes, key: proto.MatchKey, window: float, request_timeout: float
) -> proto.Response:
    """Sends `line` until a node gives an answer other than a redirect,
    trying the connections in turn every 200 ms for `window` seconds."""
    end = time.monotonic() + window
    hops = [0]
    redirect: Optional[Slot] = None
    unanswered: Optional[float] = None
    while True:
        slot = redirect or pool.pick_now()
        redirect = None
        if slot is not None:
            limit = max(0.001, min(end - time.monotonic(), request_timeout))
            try:
                answer = await pool.call(slot, line, key, limit)
            except Unanswered:
                unanswered = limit
            except Broken:
                log.debug("connection to %s broke; retrying elsewhere", slot.addr)
            else:
                if answer.kind == "E":
                    raise rejected(answer)
                if answer.kind != "M":
                    return answer
                redirect = await follow(pool, answer.addr, hops, end)
                if redirect is not None:
                    continue
        if time.monotonic() + RETRY_INTERVAL > end or pool.tls_failure() is not None:
            if unanswered is not None:
                raise errors.Unanswered(unanswered)
            raise pool.no_server()
        await asyncio.sleep(RETRY_INTERVAL)


async def follow(pool: Pool, addr: Optional[str], hops: Any, until: Optional[float]) -> Optional[Slot]:
    """Handles `M`: the connection to resend to, or None after a short
    pause when no active node is known yet. `hops` is an object with a
    `hops` count, or a one-element list, counting the redirects followed."""
    count = _bump(hops)
    pause = NO_ACTIVE_PAUSE
    if until is not None:
        pause = max(0.0, min(pause, until - time.monotonic()))
    slot = pool.slot_for(addr) if addr is not None else None
    if slot is not None and slot.silent:
        # The node named owes this client answers and says nothing (a
        # frozen leader its followers still name): not worth waiting on
        # while the others elect or promote its successor; ask them again.
        slot = None
    # Bounded by the connect timeout, not `until`: the node named has
    # not been asked yet.
    if slot is not None and not await pool.reach(slot):
        slot = None
    if slot is None or count > FREE_HOPS:
        await asyncio.sleep(pause)
    return slot


def _bump(hops: Any) -> int:
    if isinstance(hops, list):
        hops[0] += 1
        return int(hops[0])
    hops.hops += 1
    return int(hops.hops)
