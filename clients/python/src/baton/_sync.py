"""The blocking Baton client: the asyncio client run on an event loop of its
own, in a background thread, so that every behaviour (pipelining, failover,
redirects, retries, keep-alive) is the same code. Safe to use from many
threads at once."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from typing import Any, Callable, Coroutine, List, Optional, TypeVar

from . import _fork
from . import _proto as proto
from . import errors
from ._sync_watch import Election, Watch
from ._types import KeyState, NodeStatus
from .aio import _client as aio_client
from .aio import _election as aio_election
from .aio import _lock as aio_lock
from .aio import _watch as aio_watch

log = logging.getLogger("baton")

T = TypeVar("T")
SyncOnLost = Callable[["Lock"], None]


def _stop_loop(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    if loop.is_closed():
        return
    try:
        loop.call_soon_threadsafe(loop.stop)
    except RuntimeError:
        return
    if thread is not threading.current_thread():
        thread.join(timeout=5)


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        # A client stopped without close() (dropped, or at exit): its
        # background tasks are cancelled and finish, not left pending.
        try:
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


class Client:
    """A Baton client for threads and scripts.

    `servers`: "host:port" addresses (one connection each, two for a single
    address; a string of them joined by commas is accepted). `user` and
    `secret`: credentials for nodes run with `--auth-file`. `tls`: an
    `ssl.SSLContext` (or True for the system's defaults). Timeouts are
    seconds or timedeltas; `unresponsive_timeout` (4 s) is how long a node
    may leave requests unanswered, probed, before it is treated as down
    (see `baton.aio.Client`). The constructor connects: it raises
    `NoServer`, `AuthenticationFailed`, `AuthenticationRequired` (the nodes
    want credentials and none were given) or `TlsError` when no connection
    could be made. End with `close()` (or use `with`); a client dropped or
    left open at exit releases its locks then, with a warning at exit.
    A child made by fork() must make its own client (`ForkedClient`)."""

    def __init__(
        self,
        servers: aio_client.Servers,
        *,
        user: Optional[proto.Key] = None,
        secret: Optional[proto.Key] = None,
        tls: aio_client.Tls = None,
        connect_timeout: proto.Seconds = 3.0,
        request_timeout: proto.Seconds = 5.0,
        max_pending: int = 10_000,
        unresponsive_timeout: proto.Seconds = aio_client.UNRESPONSIVE_TIMEOUT,
    ) -> None:
        self._aio = aio_client.Client(
            servers,
            user=user,
            secret=secret,
            tls=tls,
            connect_timeout=connect_timeout,
            request_timeout=request_timeout,
            max_pending=max_pending,
            unresponsive_timeout=unresponsive_timeout,
        )
        # When this client is dropped unclosed, the asyncio client's
        # finalizer closes it on this loop and then stops the loop.
        self._aio._owns_loop = True
        self._generation = _fork.generation()
        self._closed = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=_run_loop, args=(self._loop,), name="baton-client", daemon=True
        )
        self._thread.start()
        try:
            self._run(self._aio.connect())
        except BaseException:
            self._closed = True
            _stop_loop(self._loop, self._thread)
            raise

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._wait(self._submit(coro))

    def _submit(self, coro: Coroutine[Any, Any, T]) -> "concurrent.futures.Future[T]":
        """Starts `coro` on the client's loop."""
        if self._generation != _fork.generation():
            coro.close()
            raise errors.ForkedClient()
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a blocking baton call from the client's own event loop thread")
        if self._loop.is_closed() or not self._thread.is_alive():
            coro.close()
            raise errors.Closed()
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    @staticmethod
    def _wait(future: "concurrent.futures.Future[T]") -> T:
        """The outcome of a call started by `_submit`."""
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise errors.Closed() from None
        except BaseException:
            # Ctrl-C while waiting: give the call up (a grant that still
            # comes is released at once).
            future.cancel()
            raise

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def acquire(
        self,
        key: proto.Key,
        wait: proto.Seconds,
        lease: proto.Seconds,
        *,
        permits: int = 1,
        shared: bool = False,
        value: Optional[proto.Value] = None,
        keep_alive: bool = False,
        on_lost: Optional[SyncOnLost] = None,
    ) -> "Lock":
        """Waits up to `wait` seconds for the lock on `key` and holds it for
        `lease` seconds (`wait=0`: as long as the node allows). `permits=n`:
        one of n permits of a semaphore; `shared=True`: a shared (reader's)
        grant; `value`: the holder's value. Raises `TimedOut` when the node
        answers that the wait ran out, `NoServer` when no node served it.
        See `baton.aio.Client.acquire`."""
        inner = self._run(
            self._aio.acquire(key, wait, lease, permits=permits, shared=shared, value=value)
        )
        return self._wrap(inner, keep_alive, on_lost)

    def _wrap(self, inner: aio_lock.Lock, keep_alive: bool, on_lost: Optional[SyncOnLost]) -> "Lock":
        lock = Lock(self, inner)
        lock.on_lost = on_lost
        if keep_alive:
            lock.keep_alive()
        return lock

    def try_acquire(
        self,
        key: proto.Key,
        lease: proto.Seconds,
        *,
        permits: int = 1,
        shared: bool = False,
        value: Optional[proto.Value] = None,
        keep_alive: bool = False,
        on_lost: Optional[SyncOnLost] = None,
    ) -> Optional["Lock"]:
        """Takes the lock (a permit, a shared grant) only if it is free now;
        None if it is held."""
        inner = self._run(
            self._aio.try_acquire(key, lease, permits=permits, shared=shared, value=value)
        )
        return None if inner is None else self._wrap(inner, keep_alive, on_lost)

    def lock(
        self,
        key: proto.Key,
        wait: proto.Seconds,
        lease: proto.Seconds,
        *,
        permits: int = 1,
        shared: bool = False,
        value: Optional[proto.Value] = None,
        on_lost: Optional[SyncOnLost] = None,
    ) -> "LockContext":
        """`with client.lock(key, wait=5, lease=30) as lock:` acquires with
        keep-alive on and releases on exit (raising `LeaseLost` on exit if
        the lease was lost meanwhile and the body raised nothing).
        `permits`, `shared` and `value` are as for `acquire`."""
        proto.key_bytes(key)
        proto.to_ms(wait, "wait", zero_ok=True)
        proto.to_ms(lease, "lease", zero_ok=False)
        options = proto.acquire_options(permits, shared, value)
        return LockContext(self, key, wait, lease, options, on_lost)

    def release(self, key: proto.Key, token: int) -> None:
        """Releases the grant of `key` with `token` (retried for 5 s)."""
        self._run(self._aio.release(key, token))

    def renew(self, key: proto.Key, token: int, lease: proto.Seconds) -> None:
        """Extends the grant of `key` with `token` to end `lease` from now."""
        self._run(self._aio.renew(key, token, lease))

    def set_value(self, key: proto.Key, token: int, value: Optional[proto.Value]) -> None:
        """Sets the value of the grant of `key` with `token` (None clears
        it); `LeaseLost` when no live grant has that token."""
        self._run(self._aio.set_value(key, token, value))

    def inspect(self, key: proto.Key) -> KeyState:
        """The key's holders (tokens, leases, values), permits, mode,
        waiters and state tag (`Q`)."""
        return self._run(self._aio.inspect(key))

    def watch(
        self,
        key: proto.Key,
        *,
        wait: proto.Seconds = aio_watch.DEFAULT_WATCH_WAIT,
        seen: Optional[str] = None,
    ) -> "Watch":
        """`for state in client.watch(key):` the key's state now, then each
        time its holders or their values change; see `baton.aio.Watch`."""
        return Watch(self, self._aio.watch(key, wait=wait, seen=seen))

    def election(
        self, name: proto.Key, lease: proto.Seconds = aio_election.DEFAULT_ELECTION_LEASE
    ) -> "Election":
        """An `Election` on the key `name`; see `baton.aio.Election`."""
        return Election(self, self._aio.election(name, lease))

    def status(self) -> List[NodeStatus]:
        """Every registered address's `S` status (or why it could not be asked)."""
        return self._run(self._aio.status())

    def close(self) -> None:
        """Releases every lock this client's `Lock`s still hold, waits for the
        answers (5 s at most) and for background releases, then closes the
        connections and the client's thread. Calling it again does nothing,
        and so does calling it in a child made by fork()."""
        if self._closed or self._generation != _fork.generation():
            return
        self._closed = True
        try:
            self._run(self._close())
        finally:
            _stop_loop(self._loop, self._thread)

    async def _close(self) -> None:
        try:
            await self._aio.close()
        finally:
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            if others:
                _, pending = await asyncio.wait(others, timeout=1.0)
                for task in pending:
                    task.cancel()


class Lock:
    """A granted lock (see `baton.aio.Lock`). `token` is the fencing token;
    `lost` is a `threading.Event` set when the lease is known to be lost
    (before it ends on the node), and `on_lost(lock)` is then called in a
    thread of its own."""

    def __init__(self, client: Client, inner: aio_lock.Lock) -> None:
        self._client = client
        self._inner = inner
        #: The key, as given to acquire.
        self.key: proto.Key = inner.key
        #: The fencing token of this grant.
        self.token: int = inner.token
        #: Set when the lease is known to be lost.
        self.lost: threading.Event = threading.Event()
        #: Called with the lock, in its own thread, when the lease is lost.
        self.on_lost: Optional[SyncOnLost] = None
        inner._hooks.append(self._inner_lost)
        if inner.is_lost:
            self.lost.set()

    def __repr__(self) -> str:
        return f"Lock(key={self.key!r}, token={self.token}, lost={self.is_lost})"

    def _inner_lost(self, _inner: aio_lock.Lock, notify: bool) -> None:
        self.lost.set()
        callback = self.on_lost
        if notify and callback is not None:
            threading.Thread(target=self._call_back, args=(callback,), daemon=True).start()

    def _call_back(self, callback: SyncOnLost) -> None:
        try:
            callback(self)
        except Exception:  # a callback's failure must not go unseen
            log.exception("on_lost callback of %r failed", self.key)

    @property
    def lease(self) -> float:
        """The lease last asked for, in seconds."""
        return self._inner.lease

    @property
    def expires_at(self) -> float:
        """The latest `time.monotonic()` the grant is known to last until."""
        return self._inner.expires_at

    @property
    def is_lost(self) -> bool:
        return self.lost.is_set()

    @property
    def released(self) -> bool:
        return self._inner.released

    @property
    def permits(self) -> int:
        """The semaphore's permits this grant is one of (1: a lock)."""
        return self._inner.permits

    @property
    def shared(self) -> bool:
        """Whether this is a shared (reader's) grant."""
        return self._inner.shared

    @property
    def value(self) -> Optional[str]:
        """The value this grant carries, as last set by this client."""
        return self._inner.value

    def set_value(self, value: Optional[proto.Value]) -> None:
        """Sets the value attached to this grant (None clears it);
        `LeaseLost` (and `lost` set) when the grant is gone."""
        self._client._run(self._inner.set_value(value))

    def renew(self, lease: Optional[proto.Seconds] = None) -> None:
        """Extends the grant to end `lease` seconds from now (default: the
        current lease). `LeaseLost` means the grant is gone."""
        self._client._run(self._inner.renew(lease))

    def release(self) -> None:
        """Releases the lock now (retried for 5 s across connections)."""
        self._client._run(self._inner.release())

    def keep_alive(self) -> None:
        """Renews in the background every third of the lease until released."""
        self._client._run(_start_keep_alive(self._inner))

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._client._run(aio_lock._exit(self._inner, exc_type is not None))


async def _start_keep_alive(lock: aio_lock.Lock) -> None:
    lock.keep_alive()


class LockContext:
    """What `Client.lock` returns: `with` acquires with keep-alive on and
    releases on exit."""

    def __init__(
        self,
        client: Client,
        key: proto.Key,
        wait: proto.Seconds,
        lease: proto.Seconds,
        options: proto.AcquireOptions,
        on_lost: Optional[SyncOnLost],
    ) -> None:
        self._client = client
        self._args = (key, wait, lease)
        self._options = options
        self._on_lost = on_lost
        self._lock: Optional[Lock] = None

    def __enter__(self) -> Lock:
        key, wait, lease = self._args
        permits, shared, value = self._options
        self._lock = self._client.acquire(
            key, wait, lease, permits=permits, shared=shared, value=value, keep_alive=True,
            on_lost=self._on_lost,
        )
        return self._lock

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._lock is not None:
            self._lock.__exit__(exc_type, exc, tb)
