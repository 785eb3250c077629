"""Locks still held when the interpreter exits. A program that ends without
`close()` would leave them held for their whole lease, blocking whoever
waits for them; at exit every client that was not closed releases what its
locks hold instead (best effort, within `EXIT_RELEASE_TIME` in all), and a
warning says so once."""

from __future__ import annotations

import asyncio
import atexit
import logging
import time
import weakref
from typing import TYPE_CHECKING, Any, Coroutine, List, Set

from .. import errors

if TYPE_CHECKING:
    from ._client import Client

log = logging.getLogger("baton")

#: The longest the interpreter's exit waits for these releases, in all.
EXIT_RELEASE_TIME = 3.0

_open: "weakref.WeakSet[Client]" = weakref.WeakSet()
#: Clients dropped unclosed, held until their finalizer's close is done.
_dropped: Set["Client"] = set()
_detached: Set["asyncio.Task[None]"] = set()


def track(client: "Client") -> None:
    """`client` is connected: release its locks at exit unless closed."""
    _open.add(client)


def hold(client: "Client") -> None:
    """`client` was dropped unclosed: keep it until `let_go` (its close
    is done), or until exit if its loop is gone."""
    _dropped.add(client)


def let_go(client: "Client") -> None:
    _dropped.discard(client)


def run_detached(coro: Coroutine[Any, Any, None]) -> None:
    """Runs `coro` as a task on the running loop, held until it ends (the
    loop keeps only weak references to tasks)."""
    task = asyncio.ensure_future(coro)
    _detached.add(task)
    task.add_done_callback(_detached.discard)


def _unclosed(client: "Client") -> bool:
    return not client._closing and not client._forked


def release_at_exit() -> None:
    # Blocking clients are closed too, locks or not, so that their threads'
    # loops stop cleanly.
    left: List["Client"] = [
        client
        for client in set(_open) | _dropped
        if _unclosed(client) and (client._live or client._owns_loop)
    ]
    count = sum(len(client._live) for client in left)
    if count:
        log.warning(
            "%d baton lock(s) still held at exit by a client that was not closed: releasing "
            "them (close() the client, or use `with`, to do it yourself)",
            count,
        )
    end = time.monotonic() + EXIT_RELEASE_TIME
    for client in left:
        budget = end - time.monotonic()
        if budget <= 0:
            log.warning("no time left at exit to release the locks of %d client(s)", len(left))
            return
        try:
            _release(client, budget)
        except Exception as err:  # best effort: the leases end them anyway
            log.warning("releasing baton locks at exit failed: %r", err)


def _release(client: "Client", budget: float) -> None:
    loop = client._loop
    if loop is not None and loop.is_running():
        # Its loop runs in another thread (the blocking client's, or the
        # program's own): close it there.
        future = asyncio.run_coroutine_threadsafe(client._close_quietly(), loop)
        future.result(budget)
    elif loop is not None and not loop.is_closed():
        loop.run_until_complete(asyncio.wait_for(client._close_quietly(), budget))
    else:
        # The loop is gone (asyncio.run returned): release on a new one.
        asyncio.run(asyncio.wait_for(_release_elsewhere(client), budget))


async def _release_elsewhere(client: "Client") -> None:
    grants = [(lock._key, lock.token) for lock in client._live.values()]
    client._closing = True
    successor = client._successor()
    try:
        await successor.connect()
        results = await asyncio.gather(
            *(successor._release_raw(key, token, successor.request_timeout) for key, token in grants),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, Exception) and not isinstance(result, errors.NotHeld):
                log.warning("release at exit failed: %s", result)
    finally:
        await successor.close()


atexit.register(release_at_exit)
