"""The asyncio client: connections, failover, redirects, retries, close.

Everything the sync `baton.Client` does runs through this code, on an event
loop of its own."""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

from .. import _fork
from .. import _proto as proto
from .. import errors
from .._types import KeyState, NodeStatus, Status
from . import _lifetime
from ._election import DEFAULT_ELECTION_LEASE, Election
from ._lock import Lock, LockContext, OnLost
from ._pool import Pool
from ._retry import FREE_HOPS, call_retrying, follow, rejected
from ._slot import UNRESPONSIVE_TIMEOUT, Broken, Shared, Slot, Unanswered
from ._watch import DEFAULT_WATCH_WAIT, Watch

log = logging.getLogger("baton")

#: Release is retried for this long (every `RETRY_INTERVAL`, across connections).
RELEASE_WINDOW = 5.0

Servers = Union[str, Sequence[str]]
Tls = Union[None, bool, ssl.SSLContext]


def _servers(servers: Servers) -> List[str]:
    """The addresses: a list, or a string of them joined by commas (the
    CLI's style), each checked now rather than at its first dial."""
    if isinstance(servers, str):
        servers = [servers]
    addrs: List[str] = []
    for item in servers:
        if not isinstance(item, str):
            raise errors.InvalidArgument(
                f"server address must be a str 'host:port', not {type(item).__name__}"
            )
        addrs += [part.strip() for part in item.split(",")]
    if not addrs or addrs == [""]:
        raise errors.InvalidArgument("no server address given")
    for addr in addrs:
        proto.split_addr(addr)
    return addrs


def _timeout(value: Any, what: str) -> float:
    return proto.to_ms(value, what, zero_ok=False) / 1000


class _Attempt:
    """One acquire's progress across its attempts."""

    def __init__(
        self, key: bytes, wait_ms: int, lease_ms: int, options: proto.AcquireOptions
    ) -> None:
        self.key = key
        self.lease_ms = lease_ms
        self.options = options
        self.deadline = time.monotonic() + wait_ms / 1000 if wait_ms > 0 else None
        self.failures = 0
        self.hops = 0
        self.redirect: Optional[Slot] = None
        #: No node has been asked yet (the first attempt), or the last answer
        #: named the node that serves: so even a wait used up in the client
        #: (try_acquire's 1 ms, on a busy machine) goes to it, and the node,
        #: not the client's own delay, says whether the key is free.
        self.forwarded = True

    def wait_left_ms(self) -> Optional[int]:
        """The wait left to send (0: unbounded); None when it ran out with
        no node having served the request."""
        if self.deadline is None:
            return 0
        left = self.deadline - time.monotonic()
        forwarded, self.forwarded = self.forwarded, False
        if left <= 0:
            return 1 if forwarded else None
        return max(1, int(-(-left * 1000 // 1)))


class Client:
    """A Baton client for asyncio. Use it as `async with baton.aio.Client(
    [...]) as client:` (or `await client.connect()` then `await
    client.close()`). Create it and use it on one event loop.

    `servers`: "host:port" addresses (one connection each, two for a single
    address; a string of them joined by commas is accepted). `user` and
    `secret`: credentials for nodes run with `--auth-file`. `tls`: an
    `ssl.SSLContext` (or True for the system's defaults) to speak TLS to
    every node. Timeouts are seconds or timedeltas. `unresponsive_timeout`
    (4 s): a connection with requests in flight that hears nothing for a
    second is probed with `S`; a node that leaves the probe unanswered
    until this much silence has passed is treated as down (a stopped or
    frozen process): the connection is closed and redialled, and its
    requests go to the other connections.
    """

    def __init__(
        self,
        servers: Servers,
        *,
        user: Optional[proto.Key] = None,
        secret: Optional[proto.Key] = None,
        tls: Tls = None,
        connect_timeout: proto.Seconds = 3.0,
        request_timeout: proto.Seconds = 5.0,
        max_pending: int = 10_000,
        unresponsive_timeout: proto.Seconds = UNRESPONSIVE_TIMEOUT,
    ) -> None:
        self._addrs = _servers(servers)
        self._credentials: Optional[Tuple[bytes, bytes]] = None
        if user is not None or secret is not None:
            if user is None or secret is None:
                raise errors.InvalidArgument("give both user and secret, or neither")
            self._credentials = (proto.key_bytes(user, "user name"), proto.secret_bytes(secret))
        if tls is True:
            tls = ssl.create_default_context()
        if tls is not None and tls is not False and not isinstance(tls, ssl.SSLContext):
            raise errors.InvalidArgument("tls must be an ssl.SSLContext, True or None")
        self._tls: Optional[ssl.SSLContext] = tls or None
        self.connect_timeout = _timeout(connect_timeout, "connect_timeout")
        self.request_timeout = _timeout(request_timeout, "request_timeout")
        self.unresponsive_timeout = _timeout(unresponsive_timeout, "unresponsive_timeout")
        if isinstance(max_pending, bool) or not isinstance(max_pending, int) or max_pending < 1:
            raise errors.InvalidArgument("max_pending must be a positive integer")
        self._max_pending = max_pending
        self._pool: Optional[Pool] = None
        self._closing = False
        self._closed = False
        self._live: Dict[int, Lock] = {}
        self._background: Set["asyncio.Task[None]"] = set()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._generation = _fork.generation()
        #: Set by the blocking client, whose thread runs this loop: a dropped
        #: client stops it once closed.
        self._owns_loop = False

    def _check_context(self) -> None:
        """Refuses a use the client's connections cannot serve: in a child
        made by fork(), or on an event loop other than its own."""
        if self._generation != _fork.generation():
            raise errors.ForkedClient()
        if self._loop is not None:
            try:
                running: Optional[asyncio.AbstractEventLoop] = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is not self._loop:
                raise errors.WrongEventLoop()

    @property
    def _forked(self) -> bool:
        return self._generation != _fork.generation()

    # Life cycle.

    async def connect(self) -> "Client":
        """Opens the connections and waits for their first attempt. Raises
        `NoServer` when no node could be reached, `AuthenticationFailed` when
        nodes were reached but refused the credentials (`AuthenticationRequired`
        when they want credentials and none were given), `TlsError` when every
        node failed for a TLS reason. Calling it again does nothing."""
        self._check_context()
        if self._closing:
            raise errors.Closed()
        if self._pool is None:
            self._loop = asyncio.get_running_loop()
            shared = Shared(
                self.connect_timeout,
                self.unresponsive_timeout,
                self._credentials,
                self._tls,
                self._max_pending,
                self._orphan,
            )
            self._pool = Pool(self._addrs, shared)
            _lifetime.track(self)
            await self._pool.settle()
            if self._pool.pick_now() is None:
                error = self._pool.auth_refusal() or self._pool.no_server()
                self._pool.shut_down()
                self._closing = self._closed = True
                raise error
        return self

    async def __aenter__(self) -> "Client":
        return await self.connect()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _started(self) -> Pool:
        self._check_context()
        if self._closing:
            raise errors.Closed()
        if self._pool is None:
            await self.connect()
        assert self._pool is not None
        return self._pool

    async def close(self) -> None:
        """Releases every lock still held by one of this client's `Lock`s,
        waits for those answers (each retried for at most 5 s, all at once)
        and for releases running in the background, then closes the
        connections. Pending acquires are given up (`Closed`). Afterwards
        every call raises `Closed`. Calling it again does nothing, and so does
        calling it in a child made by fork() (the parent's locks and
        connections are the parent's)."""
        if self._closing or self._forked:
            self._closing = True
            return
        self._check_context()
        self._closing = True
        pool = self._pool
        if pool is None:
            self._closed = True
            return
        pool.give_up_waits()
        live = list(self._live.values())
        self._live.clear()
        for lock in live:
            lock._settled_by_close()
        results = await asyncio.gather(
            *(self._release_raw(lock._key, lock.token, RELEASE_WINDOW) for lock in live),
            return_exceptions=True,
        )
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)
        pool.shut_down()
        await pool.wait_shut()
        self._closed = True
        for result in results:
            if isinstance(result, errors.NotHeld):
                continue
            if isinstance(result, BaseException):
                raise result

    def __del__(self) -> None:
        # Dropped unclosed (nothing references it; the connections' and the
        # keep-alives' tasks hold it only weakly): close it on its loop,
        # which releases what its locks hold and ends their renewals. Held
        # until then, and released at exit if its loop is gone first.
        try:
            loop = self._loop
            if self._closing or self._forked or loop is None:
                return
            if loop.is_closed():
                if self._live:
                    _lifetime.hold(self)
                return
            _lifetime.hold(self)
            loop.call_soon_threadsafe(self._close_dropped)
        except Exception:  # at interpreter exit, or the loop just closed
            pass

    def _close_dropped(self) -> None:
        _lifetime.run_detached(self._close_quietly())

    async def _close_quietly(self) -> None:
        """`close()`, its errors logged, then the loop stopped when the
        client owns it. For a client closed by someone else than its user."""
        try:
            await self.close()
        except Exception as err:
            log.warning("closing a baton client that was not closed: %s", err)
        finally:
            _lifetime.let_go(self)
            if self._owns_loop:
                asyncio.get_running_loop().stop()

    def _successor(self) -> "Client":
        """A new client with this one's settings, to every address this one
        knew of: to release its grants on another event loop."""
        addrs = self._pool.addresses() if self._pool is not None else self._addrs
        user, secret = self._credentials if self._credentials is not None else (None, None)
        return Client(
            addrs, user=user, secret=secret, tls=self._tls, connect_timeout=self.connect_timeout,
            request_timeout=self.request_timeout, max_pending=self._max_pending,
            unresponsive_timeout=self.unresponsive_timeout,
        )

    def _orphan(self, key: bytes, token: int) -> None:
        """A grant nobody waits for any more goes back to the node at once."""
        self._spawn(self._release_quiet(key, token))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _release_quiet(self, key: bytes, token: int) -> None:
        try:
            await self._release_raw(key, token, RELEASE_WINDOW)
        except errors.NotHeld:
            pass
        except errors.Error as err:
            log.warning("background release of %r (token %d) failed: %s", key, token, err)

    def _track(self, lock: Lock) -> None:
        self._live[id(lock)] = lock

    def _forget(self, lock: Lock) -> None:
        self._live.pop(id(lock), None)

    # Acquire.

    async def acquire(
        self,
        key: proto.Key,
        wait: proto.Seconds,
        lease: proto.Seconds,
        *,
        permits: int = 1,
        shared: bool = False,
        value: Optional[proto.Value] = None,
        keep_alive: bool = False,
        on_lost: Optional[OnLost] = None,
    ) -> Lock:
        """Waits up to `wait` seconds for the lock on `key` and holds it for
        `lease` seconds. `wait=0` waits as long as the node allows (its
        maximum wait). Both are rounded up to the millisecond.

        `permits=n` takes one of n permits of a semaphore (every acquirer
        of the key names the same n; `Rejected` otherwise); `shared=True`
        takes a shared (reader's) grant, which coexists with other shared
        grants but not with an exclusive one; `value` attaches a holder
        value (1 to 128 bytes, no space or control character) that
        `inspect` and `watch` report. A protocol 1.1 node refuses these
        with `Unsupported`.

        If the connection breaks meanwhile, the acquire is sent again on
        the next usable connection with what is left of the wait; so is one
        whose node stops answering (see `unresponsive_timeout`). `TimedOut` means
        the node answered that the wait ran out; `NoServer` (or its
        `Unanswered`) that no node served the request: none usable remains
        after as many attempts as there are connections, or the wait ran
        out while no node answered."""
        raw = proto.key_bytes(key)
        wait_ms = proto.to_ms(wait, "wait", zero_ok=True)
        lease_ms = proto.to_ms(lease, "lease", zero_ok=False)
        options = proto.acquire_options(permits, shared, value)
        pool = await self._started()
        attempt = _Attempt(raw, wait_ms, lease_ms, options)
        while True:
            slot = await self._next_slot(pool, attempt)
            if slot is None:
                continue
            if not await self._turn(pool, slot, attempt):
                continue
            left_ms = attempt.wait_left_ms()
            if left_ms is None:
                raise pool.no_server()
            sent = time.monotonic()
            lock = await self._attempt(pool, slot, attempt, left_ms, sent, key)
            if lock is not None:
                if keep_alive:
                    lock.keep_alive()
                if on_lost is not None:
                    lock.on_lost = on_lost
                return lock

    async def _next_slot(self, pool: Pool, attempt: _Attempt) -> Optional[Slot]:
        redirect, attempt.redirect = attempt.redirect, None
        if redirect is not None:
            return redirect
        slot = await pool.pick(attempt.deadline, ("A", attempt.key))
        if slot is not None:
            return slot
        if self._closing:
            raise errors.Closed()
        if attempt.deadline is not None and time.monotonic() >= attempt.deadline:
            raise pool.no_server()
        attempt.failures += 1
        if attempt.failures >= len(pool):
            raise pool.no_server()
        return None

    async def _turn(self, pool: Pool, slot: Slot, attempt: _Attempt) -> bool:
        """Waits until no other acquire of the key is in flight on `slot`
        (see `ONE_IN_FLIGHT_OPS`). False when the connection broke
        meanwhile: the acquire goes elsewhere. `TimedOut` when its wait ran
        out first: it was never sent."""
        try:
            if await slot.take_turn(("A", attempt.key), attempt.deadline):
                return True
        except Broken:
            await self._failed_over(pool, attempt)
            return False
        raise errors.TimedOut(proto.key_text(attempt.key))

    @staticmethod
    async def _failed_over(pool: Pool, attempt: _Attempt) -> None:
        """Counts a broken connection; `NoServer` once every connection
        failed and none comes back."""
        attempt.failures += 1
        if attempt.failures >= len(pool) and await pool.pick(attempt.deadline) is None:
            raise pool.no_server() from None

    async def _attempt(
        self, pool: Pool, slot: Slot, attempt: _Attempt, wait_ms: int, sent: float, key: proto.Key
    ) -> Optional[Lock]:
        line = proto.acquire_line(attempt.key, wait_ms, attempt.lease_ms, attempt.options)
        # The node answers T when the wait runs out; the extra time covers
        # the trip. (A frozen node is noticed sooner, by the connection's
        # probe.)
        limit = wait_ms / 1000 + self.request_timeout if attempt.deadline is not None else None
        try:
            answer = await slot.call(line, ("A", attempt.key), limit)
        except Unanswered:
            assert limit is not None
            raise errors.Unanswered(limit) from None
        except Broken:
            log.debug("connection to %s broke during acquire; failing over", slot.addr)
            await self._failed_over(pool, attempt)
            return None
        if answer.kind == "A" and answer.token is not None:
            lock = Lock(self, attempt.key, key, answer.token, attempt.lease_ms, sent, attempt.options)
            if self._closing:
                self._orphan(attempt.key, answer.token)
                raise errors.Closed()
            self._track(lock)
            return lock
        if answer.kind == "T":
            raise errors.TimedOut(proto.key_text(attempt.key))
        if answer.kind == "M":
            attempt.redirect = await follow(pool, answer.addr, attempt, attempt.deadline)
            attempt.forwarded = attempt.redirect is not None and attempt.hops <= FREE_HOPS
            return None
        if answer.kind == "E":
            raise rejected(answer, options=attempt.options != proto.AcquireOptions())
        raise errors.UnexpectedAnswer(f"unexpected answer to A: {answer.kind}")

    async def try_acquire(
        self,
        key: proto.Key,
        lease: proto.Seconds,
        *,
        permits: int = 1,
        shared: bool = False,
        value: Optional[proto.Value] = None,
        keep_alive: bool = False,
        on_lost: Optional[OnLost] = None,
    ) -> Optional[Lock]:
        """Takes the lock (a permit, a shared grant) only if it is free now
        (the shortest wait the protocol carries, 1 ms); None if the node
        says it is held. `NoServer` when no node could say."""
        try:
            return await self.acquire(
                key, 0.001, lease, permits=permits, shared=shared, value=value,
                keep_alive=keep_alive, on_lost=on_lost,
            )
        except errors.TimedOut:
            return None

    def lock(
        self,
        key: proto.Key,
        wait: proto.Seconds,
        lease: proto.Seconds,
        *,
        permits: int = 1,
        shared: bool = False,
        value: Optional[proto.Value] = None,
        on_lost: Optional[OnLost] = None,
    ) -> LockContext:
        """`async with client.lock(key, wait=5, lease=30) as lock:` acquires
        with keep-alive on, and releases on exit. `permits`, `shared` and
        `value` are as for `acquire`."""
        proto.key_bytes(key)
        proto.to_ms(wait, "wait", zero_ok=True)
        proto.to_ms(lease, "lease", zero_ok=False)
        proto.acquire_options(permits, shared, value)
        return LockContext(
            self.acquire(
                key, wait, lease, permits=permits, shared=shared, value=value, keep_alive=True,
                on_lost=on_lost,
            )
        )

    # Release, renew, inspect, status.

    async def release(self, key: proto.Key, token: int) -> None:
        """Releases the grant of `key` with `token`, retried for 5 s every
        200 ms across connections until a node answers. `NotHeld` means it
        was already released or expired."""
        await self._release_raw(proto.key_bytes(key), proto.check_token(token), RELEASE_WINDOW)

    async def _release_raw(self, key: bytes, token: int, window: float) -> None:
        self._check_context()
        if self._closed or self._pool is None:
            raise errors.Closed()
        line = proto.release_line(key, token)
        answer = await call_retrying(self._pool, line, ("R", key), window, self.request_timeout)
        if answer.kind == "R":
            return
        if answer.kind == "N":
            raise errors.NotHeld(proto.key_text(key), token)
        raise errors.UnexpectedAnswer(f"unexpected answer to R: {answer.kind}")

    async def renew(self, key: proto.Key, token: int, lease: proto.Seconds) -> None:
        """Extends the grant to end `lease` seconds from now. `LeaseLost`
        means the grant is gone: stop touching the protected resource."""
        await self._renew_raw(
            proto.key_bytes(key), proto.check_token(token), proto.to_ms(lease, "lease", zero_ok=False),
            self.request_timeout,
        )

    async def _renew_raw(self, key: bytes, token: int, lease_ms: int, window: float) -> None:
        pool = await self._started()
        line = proto.renew_line(key, token, lease_ms)
        answer = await call_retrying(pool, line, ("K", key), window, self.request_timeout)
        if answer.kind == "K":
            return
        if answer.kind == "N":
            raise errors.LeaseLost(proto.key_text(key), token)
        raise errors.UnexpectedAnswer(f"unexpected answer to K: {answer.kind}")

    async def set_value(self, key: proto.Key, token: int, value: Optional[proto.Value]) -> None:
        """`V`: sets the value of the grant of `key` with `token` (None
        clears it). `LeaseLost` means no live grant has that token."""
        raw_value = None if value is None else proto.value_bytes(value)
        await self._set_value_raw(proto.key_bytes(key), proto.check_token(token), raw_value)

    async def _set_value_raw(self, key: bytes, token: int, value: Optional[bytes]) -> None:
        pool = await self._started()
        line = proto.set_value_line(key, token, value)
        answer = await self._call(pool, line, ("V", key))
        if answer.kind == "V":
            return
        if answer.kind == "N":
            raise errors.LeaseLost(proto.key_text(key), token)
        raise errors.UnexpectedAnswer(f"unexpected answer to V: {answer.kind}")

    async def inspect(self, key: proto.Key) -> KeyState:
        """`Q <key>`: the key's holders (tokens, leases, values), permits,
        mode, waiters and state tag as the serving node sees them (in a
        Raft cluster, a linearizable read)."""
        raw = proto.key_bytes(key)
        pool = await self._started()
        answer = await self._call(pool, proto.query_line(raw), ("Q", raw))
        if answer.kind != "Q" or answer.state is None:
            raise errors.UnexpectedAnswer(f"unexpected answer to Q: {answer.kind}")
        return answer.state

    def watch(
        self, key: proto.Key, *, wait: proto.Seconds = DEFAULT_WATCH_WAIT, seen: Optional[str] = None
    ) -> Watch:
        """`async for state in client.watch(key):` the key's state now, then
        each time its holders or their values change (see `Watch`).
        `seen`: a `KeyState.tag` already seen; the first state is then the
        first one that differs from it. `wait`: how long each `W` request
        waits on the node before it is sent again (`0`: the node's maximum)."""
        return Watch(self, key, wait, seen)

    def election(self, name: proto.Key, lease: proto.Seconds = DEFAULT_ELECTION_LEASE) -> Election:
        """An `Election` on the key `name`: campaign, proclaim, leader,
        observe, resign. `lease`: the leader's lease, renewed in the
        background while it leads."""
        return Election(self, name, lease)

    async def _call(self, pool: Pool, line: bytes, key: proto.MatchKey) -> proto.Response:
        """A request retried across connections for the request timeout."""
        return await call_retrying(pool, line, key, self.request_timeout, self.request_timeout)

    async def status(self) -> List[NodeStatus]:
        """Asks every registered address for its `S` status, concurrently."""
        pool = await self._started()
        return list(await asyncio.gather(*(self._status_of(pool, a) for a in pool.addresses())))

    async def _status_of(self, pool: Pool, addr: str) -> NodeStatus:
        slot = pool.usable_to(addr)
        if slot is None:
            return NodeStatus(addr, None, pool.no_server_at(addr))
        try:
            answer = await slot.call(proto.STATUS_LINE, ("S", b""), self.request_timeout)
        except Broken:
            return NodeStatus(addr, None, pool.no_server_at(addr))
        except Unanswered:
            return NodeStatus(addr, None, errors.Unanswered(self.request_timeout))
        if answer.kind == "S" and answer.fields is not None:
            return NodeStatus(addr, Status.from_fields(answer.fields), None)
        if answer.kind == "E":
            return NodeStatus(addr, None, rejected(answer))
        return NodeStatus(addr, None, errors.UnexpectedAnswer(f"unexpected answer to S: {answer.kind}"))

__all__ = ["UNRESPONSIVE_TIMEOUT", "Client", "Lock", "LockContext"]

