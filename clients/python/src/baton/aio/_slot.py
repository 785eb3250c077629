"""One registered connection: a server address, a supervisor task that keeps
a socket to it open (authenticated, TLS when asked), and the requests
pending on it, matched to their answers by (op, key), oldest first, as
PROTOCOL.md says. A broken connection is redialled every 3 seconds."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections import deque
from typing import Callable, Deque, Dict, List, Optional, Tuple

from .. import _proto as proto
from .. import errors

log = logging.getLogger("baton")

#: How long a broken connection stays out before the next attempt.
RECONNECT_INTERVAL = 3.0


class Broken(Exception):
    """The connection is down, or broke before the answer came."""


class Unanswered(Exception):
    """The connection is up but the answer did not come in time."""


class Signal:
    """Wakes every waiter whenever a connection comes up or gives up."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def publish(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, timeout: Optional[float]) -> bool:
        """True if something changed within `timeout`."""
        event = self._event
        try:
            await asyncio.wait_for(event.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False


class Shared:
    """What every connection of one client shares."""

    def __init__(
        self,
        connect_timeout: float,
        credentials: Optional[Tuple[bytes, bytes]],
        tls: Optional[ssl.SSLContext],
        max_pending: int,
        on_orphan: Callable[[bytes, int], None],
    ) -> None:
        self.connect_timeout = connect_timeout
        self.credentials = credentials
        self.tls = tls
        self.max_pending = max_pending
        self.on_orphan = on_orphan
        self.changed = Signal()
        self.closed = asyncio.Event()


class _Entry:
    __slots__ = ("fut", "abandoned")

    def __init__(self, fut: "asyncio.Future[proto.Response]") -> None:
        self.fut = fut
        self.abandoned = False


class _AuthRefused(Exception):
    def __init__(self, error: errors.Error) -> None:
        super().__init__(str(error))
        self.error = error


class _TlsFailure(Exception):
    pass


class Slot:
    """A connection as the pool sees it."""

    def __init__(self, addr: str, shared: Shared) -> None:
        self.addr = addr
        self.host, self.port = proto.split_addr(addr)
        self._shared = shared
        self.usable = False
        self.attempted = False
        self.auth_refusal: Optional[errors.Error] = None
        self.tls_failure: Optional[str] = None
        self._pending: Dict[proto.MatchKey, Deque[_Entry]] = {}
        self._count = 0
        self._writer: Optional[asyncio.StreamWriter] = None
        self._task = asyncio.ensure_future(self._supervise())

    @property
    def full(self) -> bool:
        return self._count >= self._shared.max_pending

    # Calls.

    async def call(self, line: bytes, key: proto.MatchKey, limit: Optional[float]) -> proto.Response:
        """Sends one request line and waits for its answer, at most `limit`
        seconds. A caller that gives up (timeout, cancellation) leaves its
        entry in place, so later answers still match; a grant that comes
        for it is released at once."""
        entry = self._register(line, key)
        try:
            done, _ = await asyncio.wait({entry.fut}, timeout=limit)
        except BaseException:
            self._abandon(entry)
            raise
        if not done:
            self._abandon(entry)
            raise Unanswered()
        return entry.fut.result()

    def _register(self, line: bytes, key: proto.MatchKey) -> _Entry:
        writer = self._writer
        if not self.usable or writer is None or writer.is_closing():
            raise Broken()
        if self.full:
            raise errors.Error(
                f"too many requests in flight on the connection to {self.addr} "
                f"(max_pending={self._shared.max_pending})"
            )
        entry = _Entry(asyncio.get_running_loop().create_future())
        # Registered before written: the answer cannot come before this.
        self._pending.setdefault(key, deque()).append(entry)
        self._count += 1
        writer.write(line)
        return entry

    def _abandon(self, entry: _Entry) -> None:
        entry.abandoned = True
        fut = entry.fut
        if fut.done() and not fut.cancelled() and fut.exception() is None:
            self._orphan(fut.result())

    def _orphan(self, response: proto.Response) -> None:
        if response.kind == "A" and response.token is not None:
            log.debug("grant of %r came for nobody; releasing it", response.key)
            self._shared.on_orphan(response.key, response.token)

    def give_up_acquires(self) -> None:
        """`close` gives up pending acquires: their callers get `Closed`, and
        a grant that still comes for one is released at once."""
        for (op, _), queue in self._pending.items():
            if op != "A":
                continue
            for entry in queue:
                if not entry.abandoned and not entry.fut.done():
                    entry.abandoned = True
                    entry.fut.set_exception(errors.Closed())

    def _deliver(self, response: proto.Response) -> None:
        queue = self._pending.get(response.match_key)
        if not queue:
            log.warning("answer %s %r matches no pending request; ignored", response.kind, response.key)
            return
        entry = queue.popleft()
        self._count -= 1
        if not queue:
            del self._pending[response.match_key]
        if entry.abandoned or entry.fut.done():
            self._orphan(response)
        else:
            entry.fut.set_result(response)

    def _fail_pending(self) -> None:
        pending: List[_Entry] = [e for q in self._pending.values() for e in q]
        self._pending.clear()
        self._count = 0
        for entry in pending:
            if entry.fut.done():
                continue
            if entry.abandoned:
                entry.fut.cancel()
            else:
                entry.fut.set_exception(Broken())

    # The supervisor.

    async def _supervise(self) -> None:
        shared = self._shared
        while not shared.closed.is_set():
            try:
                reader, writer = await asyncio.wait_for(self._dial(), shared.connect_timeout)
            except _TlsFailure as err:
                self.tls_failure = str(err)
                log.warning("TLS with %s failed: %s", self.addr, err)
            except _AuthRefused as err:
                self.auth_refusal = err.error
                self.tls_failure = None
                log.warning("%s did not accept the credentials: %s", self.addr, err)
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, EOFError, proto.BadLine) as err:
                self.tls_failure = None
                log.debug("connect to %s failed: %r", self.addr, err)
            else:
                await self._serve(reader, writer)
                if shared.closed.is_set():
                    break
            if not self.attempted:
                self.attempted = True
                shared.changed.publish()
            try:
                await asyncio.wait_for(shared.closed.wait(), RECONNECT_INTERVAL)
            except asyncio.TimeoutError:
                pass
        self.attempted = True
        shared.changed.publish()

    async def _dial(self) -> Tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        tls = self._shared.tls
        try:
            reader, writer = await asyncio.open_connection(
                self.host,
                self.port,
                ssl=tls,
                server_hostname=self.host if tls is not None else None,
                limit=proto.MAX_LINE,
            )
        except ssl.SSLError as err:
            raise _TlsFailure(_tls_words(err)) from None
        if self._shared.credentials is not None:
            try:
                await self._authenticate(reader, writer)
            except BaseException:
                writer.close()
                raise
        return reader, writer

    async def _authenticate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._shared.credentials is not None
        user, secret = self._shared.credentials
        writer.write(proto.auth_line(user, secret))
        answer = proto.parse_response((await _read_line(reader))[:-1])
        if answer.kind == "U" and answer.key == user:
            self.auth_refusal = None
            return
        if answer.kind == "E" and answer.reason == "authentication failed":
            raise _AuthRefused(errors.AuthenticationFailed())
        if answer.kind == "E" and answer.reason == "authentication is not enabled":
            raise _AuthRefused(errors.AuthenticationNotEnabled())
        if answer.kind == "E" and answer.reason.startswith("TLS required"):
            raise _TlsFailure(TLS_REQUIRED)
        raise proto.BadLine("unexpected answer to U")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self.tls_failure = None
        self.usable = True
        self.attempted = True
        self._shared.changed.publish()
        log.debug("connected to %s", self.addr)
        try:
            await self._read_answers(reader)
        finally:
            self.usable = False
            self._writer = None
            writer.close()
            self._fail_pending()
            if not self._shared.closed.is_set():
                log.info("connection to %s lost; reconnecting in the background", self.addr)
            self._shared.changed.publish()

    async def _read_answers(self, reader: asyncio.StreamReader) -> None:
        closed = asyncio.ensure_future(self._shared.closed.wait())
        try:
            while True:
                read = asyncio.ensure_future(_read_line(reader))
                await asyncio.wait({read, closed}, return_when=asyncio.FIRST_COMPLETED)
                if not read.done():
                    read.cancel()
                    return
                try:
                    line = read.result()
                    response = proto.parse_response(line[:-1])
                except (OSError, EOFError, asyncio.IncompleteReadError, ssl.SSLError) as err:
                    if isinstance(err, ssl.SSLError):
                        self.tls_failure = _tls_words(err)
                    log.debug("read from %s failed: %r", self.addr, err)
                    return
                except proto.BadLine as err:
                    log.warning("bad answer line from %s (%s); dropping the connection", self.addr, err)
                    return
                if response.kind == "E" and response.op == "?" and response.reason.startswith("TLS required"):
                    self.tls_failure = TLS_REQUIRED
                    return
                self._deliver(response)
        finally:
            closed.cancel()

    def shut_down(self) -> None:
        writer = self._writer
        if writer is not None:
            writer.close()


TLS_REQUIRED = "the node serves TLS only: give the client an ssl.SSLContext (tls=...)"


def _tls_words(err: ssl.SSLError) -> str:
    text = getattr(err, "verify_message", None) or err.reason or str(err)
    if "WRONG_VERSION_NUMBER" in str(err).upper():
        return "the node does not speak TLS (a plaintext node): connect without tls"
    return str(text)


async def _read_line(reader: asyncio.StreamReader) -> bytes:
    """One line with its LF, at most 1024 bytes; longer ones break the
    connection (a Baton node never sends them)."""
    try:
        return await reader.readuntil(b"\n")
    except asyncio.LimitOverrunError:
        raise proto.BadLine("answer line longer than 1024 bytes") from None
