"""A held lock (a grant: exclusive, shared, or one permit of a semaphore):
its token, value, renewal, optional keep-alive, the `lost` event."""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from typing import TYPE_CHECKING, Any, Awaitable, Callable, List, Optional, Union

from .. import _proto as proto
from .. import errors
from . import _lifetime

if TYPE_CHECKING:
    from ._client import Client

log = logging.getLogger("baton")

#: The keep-alive renews every third of the lease: two more tries remain
#: before the grant could lapse.
KEEP_ALIVE_DIVISOR = 3
#: Pause between renew attempts after one failed without a verdict.
RENEW_RETRY = 0.2
#: The keep-alive gives up, and the lock is marked lost, when a tenth of the
#: lease is left: the program hears it before the lease ends on the node,
#: with time to stop touching the resource.
LOST_MARGIN_DIVISOR = 10

OnLost = Callable[["Lock"], Union[None, Awaitable[None]]]


class Lock:
    """A granted lock. `token` is the fencing token: hand it to the protected
    resource. End it with `release()` (or `async with`), or let
    `Client.close()` release it. `lost` is set when the lease is known to be
    lost: a renewal was answered `N K`, or the keep-alive could not renew
    before the lease ran out (it is set before the lease ends on the node)."""

    def __init__(
        self,
        client: "Client",
        raw: bytes,
        key: proto.Key,
        token: int,
        lease_ms: int,
        sent: float,
        options: proto.AcquireOptions = proto.AcquireOptions(),
    ) -> None:
        self._client = client
        self._key = raw
        #: The key, as given to acquire.
        self.key: proto.Key = key
        #: The fencing token of this grant.
        self.token: int = token
        #: The semaphore's permits this grant is one of (1: a lock).
        self.permits: int = options.permits
        #: Whether this is a shared (reader's) grant.
        self.shared: bool = options.shared
        self._value = options.value
        self._lease_ms = lease_ms
        #: Latest moment (time.monotonic()) the grant is known to last until,
        #: counted from when the acquire or renew was sent (errs on the safe side).
        self.expires_at: float = sent + lease_ms / 1000
        #: Set when the lease is known to be lost.
        self.lost: asyncio.Event = asyncio.Event()
        #: Called (with the lock) when the lease is lost; may be a coroutine function.
        self.on_lost: Optional[OnLost] = None
        self._hooks: List[Callable[["Lock", bool], None]] = []
        self._settled = False
        self._keep_alive: Optional["asyncio.Task[None]"] = None

    def __repr__(self) -> str:
        return f"Lock(key={self.key!r}, token={self.token}, lost={self.is_lost})"

    @property
    def lease(self) -> float:
        """The lease last asked for, in seconds."""
        return self._lease_ms / 1000

    @property
    def is_lost(self) -> bool:
        return self.lost.is_set()

    @property
    def value(self) -> Optional[str]:
        """The value this grant carries, as last set by this client."""
        return None if self._value is None else proto.value_text(self._value)

    async def set_value(self, value: Optional[proto.Value]) -> None:
        """Sets the value attached to this grant (None clears it), as
        `inspect` and `watch` report it. `LeaseLost` (and `lost` set) when
        the grant is gone."""
        raw = None if value is None else proto.value_bytes(value)
        self._refuse_if_settled()
        try:
            await self._client._set_value_raw(self._key, self.token, raw)
        except errors.LeaseLost:
            self._mark_lost()
            raise
        self._value = raw

    @property
    def released(self) -> bool:
        """Whether this lock was released (or given up to `close`)."""
        return self._settled

    def _mark_lost(self, notify: bool = True) -> None:
        if self.lost.is_set():
            return
        self.lost.set()
        for hook in list(self._hooks):
            hook(self, notify)
        if notify and self.on_lost is not None:
            try:
                result = self.on_lost(self)
                if asyncio.iscoroutine(result):
                    _lifetime.run_detached(_logged(result, self.key))
            except Exception:  # a callback's failure must not stop the client
                log.exception("on_lost callback of %r failed", self.key)

    def _refuse_if_settled(self) -> None:
        if self._settled:
            raise errors.Closed() if self._client._closing else errors.NotHeld(
                proto.key_text(self._key), self.token
            )

    def _settled_by_close(self) -> None:
        self._settled = True
        self._stop_keep_alive()
        self._mark_lost(notify=False)

    async def renew(self, lease: Optional[proto.Seconds] = None) -> None:
        """Extends the grant to end `lease` seconds from now (default: the
        lease it has). `LeaseLost` means the grant is gone and the protected
        resource must not be touched; `lost` is then set."""
        lease_ms = self._lease_ms if lease is None else proto.to_ms(lease, "lease", zero_ok=False)
        await self._renew(lease_ms, self._client.request_timeout)

    async def _renew(self, lease_ms: int, window: float) -> None:
        self._refuse_if_settled()
        sent = time.monotonic()
        try:
            await self._client._renew_raw(self._key, self.token, lease_ms, window)
        except errors.LeaseLost:
            self._mark_lost()
            raise
        self._lease_ms = lease_ms
        self.expires_at = sent + lease_ms / 1000

    async def release(self) -> None:
        """Releases the lock now (retried for 5 s across connections).
        `NotHeld` means it had already expired or been released; `Closed`,
        that `Client.close` released it already."""
        self._stop_keep_alive()
        self._refuse_if_settled()
        self._settled = True
        self._client._forget(self)
        await self._client.release(self._key, self.token)

    def keep_alive(self) -> None:
        """Renews in the background every third of the lease until the lock
        is released; `lost` is set (and `on_lost` called) when renewal fails
        for good. Calling it again does nothing."""
        if self._keep_alive is None and not self._settled:
            self._keep_alive = asyncio.ensure_future(_keep_alive_loop(weakref.ref(self)))

    def _stop_keep_alive(self) -> None:
        task, self._keep_alive = self._keep_alive, None
        if task is not None and task is not _current_task():
            task.cancel()

    async def _renew_for_keep_alive(self) -> bool:
        """One keep-alive renewal, retried until the lease would end;
        whether to go on renewing."""
        lease_ms = self._lease_ms
        while True:
            # Retrying past the lease's end would only hide that it is lost.
            window = max(RENEW_RETRY, self._lost_deadline() - time.monotonic())
            try:
                await self._renew(lease_ms, window)
                return True
            except (errors.LeaseLost, errors.Closed, errors.NotHeld):
                return False
            except errors.Error as err:
                if time.monotonic() + RENEW_RETRY >= self._lost_deadline():
                    log.warning("could not renew %r before the lease ran out: %s", self.key, err)
                    self._mark_lost()
                    return False
                log.debug("renew of %r failed (%s); retrying", self.key, err)
                await asyncio.sleep(RENEW_RETRY)

    def _lost_deadline(self) -> float:
        """When the keep-alive stops trying and marks the lock lost."""
        return self.expires_at - self._lease_ms / 1000 / LOST_MARGIN_DIVISOR

    async def __aenter__(self) -> "Lock":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        await _exit(self, exc_type is not None)


async def _exit(lock: Lock, failing: bool) -> None:
    """Releases on leaving a `with` block. When the body succeeded but the
    lease was lost meanwhile, that is reported as `LeaseLost`."""
    was_lost = lock.is_lost
    try:
        await lock.release()
    except errors.Error as err:
        if failing:
            log.debug("release of %r after an error failed: %s", lock.key, err)
            return
        if isinstance(err, errors.NotHeld) or was_lost:
            raise errors.LeaseLost(proto.key_text(lock._key), lock.token) from err
        if isinstance(err, errors.Closed):
            return
        raise


async def _keep_alive_loop(ref: "weakref.ref[Lock]") -> None:
    """Renews every third of the lease. It holds the lock only weakly
    between renewals: a lock (and client) nobody references any more is
    closed by its client's finalizer, not kept alive by its renewals."""
    while True:
        lock = ref()
        if lock is None or lock._settled:
            return
        pause = max(0.001, lock._lease_ms / 1000 / KEEP_ALIVE_DIVISOR)
        del lock
        await asyncio.sleep(pause)
        lock = ref()
        if lock is None or lock._settled or not await lock._renew_for_keep_alive():
            return
        del lock


async def _logged(callback: Awaitable[None], key: proto.Key) -> None:
    """Awaits an async `on_lost`, logging what it raises (instead of
    asyncio's "Task exception was never retrieved")."""
    try:
        await callback
    except Exception:
        log.exception("on_lost callback of %r failed", key)


def _current_task() -> Optional["asyncio.Task[Any]"]:
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None


class LockContext:
    """What `Client.lock` returns: `async with` acquires (keep-alive on) and
    releases on exit."""

    def __init__(self, acquire: Awaitable[Lock]) -> None:
        self._acquire = acquire
        self._lock: Optional[Lock] = None

    async def __aenter__(self) -> Lock:
        self._lock = await self._acquire
        return self._lock

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._lock is not None:
            await _exit(self._lock, exc_type is not None)

    def __del__(self) -> None:
        # An unused context: close the acquire coroutine without a warning.
        if self._lock is None and asyncio.iscoroutine(self._acquire):
            self._acquire.close()
