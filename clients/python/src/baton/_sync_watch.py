"""The blocking client's watches and elections: the asyncio ones, each step
run on the client's loop. A watch's iterator can be closed from another
thread, which gives up the step under way."""

from __future__ import annotations

import concurrent.futures
import threading
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Generic, Optional, TypeVar

from . import _proto as proto
from ._types import KeyState, Leader
from .aio import _election as aio_election
from .aio import _watch as aio_watch

if TYPE_CHECKING:
    from ._sync import Client, Lock

T = TypeVar("T")


class Steps(Generic[T]):
    """A blocking iterator over an asyncio one run on the client's loop;
    `close()` (from any thread) ends it and gives up the step under way."""

    def __init__(self, client: "Client", inner: AsyncIterator[T], close: Callable[[], None]) -> None:
        self._client = client
        self._inner = inner
        self._close_inner = close
        self._closed = threading.Event()
        self._step: Optional["concurrent.futures.Future[T]"] = None

    def __iter__(self) -> "Steps[T]":
        return self

    def __next__(self) -> T:
        if self._closed.is_set():
            raise StopIteration
        self._step = self._client._submit(_next(self._inner))
        if self._closed.is_set():  # closed while the step was being started
            self._step.cancel()
        try:
            return self._client._wait(self._step)
        except StopAsyncIteration:
            raise StopIteration from None
        except Exception:
            if self._closed.is_set():
                raise StopIteration from None
            raise
        finally:
            self._step = None

    def close(self) -> None:
        """Ends the iteration; a step under way (in another thread) is
        given up and its `next()` raises `StopIteration`."""
        self._closed.set()
        self._close_inner()
        step = self._step
        if step is not None:
            step.cancel()

    def __enter__(self) -> "Steps[T]":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


async def _next(inner: AsyncIterator[T]) -> T:
    return await inner.__anext__()


class Watch(Steps[KeyState]):
    """`for state in client.watch(key):` see `baton.aio.Watch`."""

    def __init__(self, client: "Client", inner: aio_watch.Watch) -> None:
        super().__init__(client, inner, inner.close)
        self._watch = inner
        #: The key, as given to `watch`.
        self.key: proto.Key = inner.key

    @property
    def last(self) -> Optional[KeyState]:
        """The last state this watch gave."""
        return self._watch.last


class Election:
    """`client.election(name, lease=10)`: see `baton.aio.Election`. The
    grant `campaign` returns is a `baton.Lock` (`with` it to resign)."""

    def __init__(self, client: "Client", inner: aio_election.Election) -> None:
        self._client = client
        self._inner = inner
        #: The election's key.
        self.name: proto.Key = inner.name
        self._lock: Optional["Lock"] = None

    def __repr__(self) -> str:
        return f"Election(name={self.name!r}, leading={self.lock is not None})"

    @property
    def lock(self) -> Optional["Lock"]:
        """This client's grant while it leads, else None."""
        inner = self._inner.lock
        if inner is None or self._lock is None or self._lock._inner is not inner:
            return None
        return self._lock

    def campaign(
        self,
        value: proto.Value,
        *,
        wait: proto.Seconds = 0,
        on_lost: Optional[Callable[["Lock"], None]] = None,
    ) -> "Lock":
        """Waits up to `wait` seconds (`0`: as long as the node allows) to
        lead with `value`; keep-alive on. Campaigning while leading
        proclaims `value`. `on_lost(lock)` runs in a thread of its own."""
        inner = self._client._run(self._inner.campaign(value, wait=wait))
        lock = self.lock
        if lock is None:
            lock = self._client._wrap(inner, False, on_lost)
            self._lock = lock
        return lock

    def proclaim(self, value: proto.Value) -> None:
        """Sets the leader's value; `NotLeader` when this client does not lead."""
        self._client._run(self._inner.proclaim(value))

    def leader(self) -> Optional[Leader]:
        """The current leader (value and token), None while there is none."""
        return self._client._run(self._inner.leader())

    def observe(self, *, wait: proto.Seconds = aio_watch.DEFAULT_WATCH_WAIT) -> Steps[Optional[Leader]]:
        """`for leader in election.observe():` the leader now, then each new
        leader or value (None while the office is vacant)."""
        inner = self._inner.observe(wait=wait)
        return Steps(self._client, inner, inner.close)

    def resign(self) -> None:
        """Gives up leading (releases the grant); nothing when not leading."""
        self._lock = None
        self._client._run(self._inner.resign())
