"""One registered connection: a server address, a supervisor task that keeps
a socket to it open (authenticated, TLS when asked), and the requests
pending on it, matched to their answers by (op, key), oldest first, as
docs/protocol.md says. A broken connection is redialled every 3 seconds, at
once when a redirect names it.

A node answers every request within 3 s (docs/protocol.md, "Answer time"),
so a connection that has requests in flight and stays silent is probed
with `S`; a probe left unanswered means the node is frozen (stopped,
paused, stuck), and the connection is treated exactly like a cut one. A
dial counts only once the node has answered (`U`, or an `S` handshake): a
frozen node still completes TCP handshakes from its kernel."""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
import weakref
from collections import deque
from typing import Callable, Deque, Dict, List, Optional, Tuple

from .. import _proto as proto
from .. import errors

log = logging.getLogger("baton")

#: How long a broken connection stays out before the next attempt.
RECONNECT_INTERVAL = 3.0
#: A redirect dials a down connection at once, but at most this often, so
#: that redirects to a node that keeps failing do not become a dial storm.
REDIRECT_DIAL_GAP = 1.0
#: Default for how long a connection with requests in flight may go without
#: an answer before it is treated as cut: one second of silence, then a
#: probe given the protocol's 3 s answer time.
UNRESPONSIVE_TIMEOUT = 4.0
#: The silence that triggers a probe, at most (a quarter of the timeout
#: when that is shorter).
PROBE_AFTER = 1.0


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
    """What every connection of one client shares. It holds the client only
    weakly (`on_orphan`): the connections' tasks must not keep alive a
    client nobody references, so that dropping it releases its locks."""

    def __init__(
        self,
        connect_timeout: float,
        unresponsive_timeout: float,
        credentials: Optional[Tuple[bytes, bytes]],
        tls: Optional[ssl.SSLContext],
        max_pending: int,
        on_orphan: Callable[[bytes, int], None],
    ) -> None:
        self.connect_timeout = connect_timeout
        self.probe_after = min(PROBE_AFTER, unresponsive_timeout / 4)
        self.probe_timeout = unresponsive_timeout - self.probe_after
        self.credentials = credentials
        self.tls = tls
        self.max_pending = max_pending
        self._on_orphan = weakref.WeakMethod(on_orphan)
        self.changed = Signal()
        self.closed = asyncio.Event()

    def on_orphan(self, key: bytes, token: int) -> None:
        callback = self._on_orphan()
        if callback is not None:
            callback(key, token)


#: Ops a protocol 1.1 node does not know: it answers them `E ? ? unknown op`.
NEWER_OPS = ("V", "W")
#: Ops of which at most one request per key is in flight on a connection.
#: Their answers can overtake an older request of the same key (a shorter
#: wait's `T`, a refusal's `E`, a watch answered at once), and matching by
#: (op, key), oldest first, would then hand them to the wrong caller. A
#: further request of the key waits in the client, first come first served.
ONE_IN_FLIGHT_OPS = ("A", "W")


class _Entry:
    __slots__ = ("fut", "abandoned", "sent")

    def __init__(self, fut: "asyncio.Future[proto.Response]", sent: int) -> None:
        self.fut = fut
        self.abandoned = False
        #: Its place in the order of the requests written on the connection.
        self.sent = sent


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
        #: Callers waiting for their turn to send a request of a key of
        #: `ONE_IN_FLIGHT_OPS`, oldest first; the head is woken (its future
        #: set) when none of that key is in flight, and leaves the line.
        self._lines: Dict[proto.MatchKey, Deque["asyncio.Future[None]"]] = {}
        self._count = 0
        self._written = 0
        self._writer: Optional[asyncio.StreamWriter] = None
        #: When the connection was last heard from, or went from idle to busy.
        self._quiet_since = time.monotonic()
        #: Set while requests are in flight: wakes the watchdog.
        self._busy = asyncio.Event()
        #: Cuts the pause before the next dial short.
        self._dial_now = asyncio.Event()
        self._dialing = False
        self._dial_started = float("-inf")
        #: A probe is out: the node has been silent; new requests go elsewhere.
        self.probing = False
        #: Dials that failed, counted so a waiter can tell one failed.
        self.failed_dials = 0
        self.task = asyncio.ensure_future(self._supervise())

    @property
    def full(self) -> bool:
        return self._count >= self._shared.max_pending

    def silent_for(self) -> float:
        """How long the connection has owed answers without a word from
        its node (0 while nothing is in flight)."""
        return time.monotonic() - self._quiet_since if self._count else 0.0

    @property
    def silent(self) -> bool:
        """Its node has said nothing for the probe delay while owing
        answers (a probe is out, or about to go): it may be frozen, so
        nothing new should wait on it while another node can be asked."""
        return self.probing or self.silent_for() >= self._shared.probe_after

    # Calls.

    def in_flight(self, key: proto.MatchKey) -> bool:
        """Whether a request of `key` is in flight on this connection (an
        abandoned one counts until its answer comes) or waits for its turn."""
        return key in self._pending or key in self._lines

    async def take_turn(self, key: proto.MatchKey, until: Optional[float]) -> bool:
        """For a key of `ONE_IN_FLIGHT_OPS`: waits until none of `key` is in
        flight on this connection and every earlier caller of it had its
        turn. True when the caller may send now: it must `call` at once,
        with no await in between. False when `until` (a monotonic time)
        passed first. `Broken` when the connection breaks meanwhile,
        `Closed` when the client closes."""
        if key[0] not in ONE_IN_FLIGHT_OPS or not self.in_flight(key):
            return True
        turn: "asyncio.Future[None]" = asyncio.get_running_loop().create_future()
        self._lines.setdefault(key, deque()).append(turn)
        timeout = None if until is None else max(0.0, until - time.monotonic())
        try:
            done, _ = await asyncio.wait({turn}, timeout=timeout)
        except BaseException:
            self._leave_line(key, turn, used=False)
            raise
        if not done or turn.cancelled():
            self._leave_line(key, turn, used=False)
            return False
        error = turn.exception()
        self._leave_line(key, turn, used=error is None)
        if error is not None:
            raise error
        return True

    def _leave_line(self, key: proto.MatchKey, turn: "asyncio.Future[None]", used: bool) -> None:
        if turn.done() and not turn.cancelled():
            turn.exception()  # retrieved: a Broken nobody waits for is not logged
        line = self._lines.get(key)
        if line is not None and turn in line:
            line.remove(turn)
            if not line:
                del self._lines[key]
        if not used:
            self._pass_turn(key)

    def _pass_turn(self, key: proto.MatchKey) -> None:
        """Wakes the oldest caller waiting for `key` once none of it is in flight."""
        line = self._lines.get(key)
        if key in self._pending or not line:
            return
        head = line[0]
        if not head.done():
            head.set_result(None)

    def _end_lines(self, error: Callable[[], BaseException]) -> None:
        for line in self._lines.values():
            for turn in line:
                if not turn.done():
                    turn.set_exception(error())

    async def call(
        self, line: bytes, key: proto.MatchKey, limit: Optional[float], *, probe: bool = False
    ) -> proto.Response:
        """Sends one request line and waits for its answer, at most `limit`
        seconds. A caller that gives up (timeout, cancellation) leaves its
        entry in place, so later answers still match; a grant that comes
        for it is released at once. A `probe` goes out even on a connection
        at its pending-request limit."""
        entry = self._register(line, key, probe)
        try:
            done, _ = await asyncio.wait({entry.fut}, timeout=limit)
        except BaseException:
            self._abandon(entry)
            raise
        if not done:
            self._abandon(entry)
            raise Unanswered()
        return entry.fut.result()

    def _register(self, line: bytes, key: proto.MatchKey, probe: bool) -> _Entry:
        writer = self._writer
        if not self.usable or writer is None or writer.is_closing():
            raise Broken()
        if self.full and not probe:
            raise errors.Error(
                f"too many requests in flight on the connection to {self.addr} "
                f"(max_pending={self._shared.max_pending})"
            )
        self._written += 1
        entry = _Entry(asyncio.get_running_loop().create_future(), self._written)
        # Registered before written: the answer cannot come before this.
        self._pending.setdefault(key, deque()).append(entry)
        if self._count == 0:
            self._quiet_since = time.monotonic()
            self._busy.set()
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

    def give_up_waits(self) -> None:
        """`close` gives up pending acquires and watches: their callers get
        `Closed`, and a grant that still comes for one is released at once."""
        self._end_lines(errors.Closed)
        for (op, _), queue in self._pending.items():
            if op not in ("A", "W"):
                continue
            for entry in queue:
                if not entry.abandoned and not entry.fut.done():
                    entry.abandoned = True
                    entry.fut.set_exception(errors.Closed())

    def _deliver(self, response: proto.Response) -> None:
        self._quiet_since = time.monotonic()
        if response.kind == "E" and response.op == "?" and response.reason == proto.UNKNOWN_OP:
            response = self._unknown_op(response)
        queue = self._pending.get(response.match_key)
        if not queue:
            log.warning("answer %s %r matches no pending request; ignored", response.kind, response.key)
            return
        entry = queue.popleft()
        self._count -= 1
        if not queue:
            del self._pending[response.match_key]
            self._pass_turn(response.match_key)
        if entry.abandoned or entry.fut.done():
            self._orphan(response)
        else:
            entry.fut.set_result(response)

    def _unknown_op(self, response: proto.Response) -> proto.Response:
        """`E ? ? unknown op` names no request: a 1.1 node's answer to a 1.2
        op. A node answers it at once, in the order it reads requests, so it
        is for the oldest pending request of such an op (a 1.2 node never
        answers them so): it is given that request's op and key."""
        heads = [
            (queue[0].sent, key)
            for key, queue in self._pending.items()
            if key[0] in NEWER_OPS and queue
        ]
        if not heads:
            return response
        op, key = min(heads)[1]
        return response._replace(op=op, key=key)

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
        # Those still waiting for their turn go elsewhere too, after the
        # ones that were sent (woken in that order).
        self._end_lines(Broken)

    # The supervisor.

    def dial_now(self) -> bool:
        """A redirect names this connection's node: if the connection is
        down, dial now instead of at the next 3-second round (at most once
        a second, so a node that keeps failing is not dialled in a loop).
        Whether a dial is under way."""
        if self.usable or self._dialing:
            return self._dialing
        if time.monotonic() - self._dial_started < REDIRECT_DIAL_GAP:
            return False
        self._dial_now.set()
        return True

    async def _supervise(self) -> None:
        shared = self._shared
        while not shared.closed.is_set():
            stream = await self._try_dial()
            if stream is not None:
                await self._serve(*stream)
                if shared.closed.is_set():
                    break
            await self._pause()
        self.attempted = True
        shared.changed.publish()

    async def _try_dial(self) -> Optional[Tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
        """One dial; None (and a published change) when it failed."""
        self._dialing = True
        self._dial_started = time.monotonic()
        try:
            return await asyncio.wait_for(self._dial(), self._shared.connect_timeout)
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
        except Exception as err:  # e.g. a name the resolver refuses: keep trying, say why
            self.tls_failure = None
            log.warning("connect to %s failed: %r", self.addr, err)
        finally:
            self._dialing = False
        self.attempted = True
        self.failed_dials += 1
        self._shared.changed.publish()
        return None

    async def _pause(self) -> None:
        """Waits before the next dial: `RECONNECT_INTERVAL`, or less when the
        client closes or a redirect asks for this node."""
        self._dial_now.clear()
        closed = asyncio.ensure_future(self._shared.closed.wait())
        woken = asyncio.ensure_future(self._dial_now.wait())
        try:
            await asyncio.wait(
                {closed, woken}, timeout=RECONNECT_INTERVAL, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            closed.cancel()
            woken.cancel()

    async def _dial(self) -> Tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        tls = self._shared.tls
        try:
            reader, writer = await asyncio.open_connection(
                self.host,
                self.port,
                ssl=tls,
                server_hostname=self.host if tls is not None else None,
                limit=proto.MAX_ANSWER_LINE,
            )
        except ssl.SSLError as err:
            raise _TlsFailure(_tls_words(err)) from None
        try:
            if self._shared.credentials is not None:
                await self._authenticate(reader, writer)
            else:
                await _handshake(reader, writer)
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
        self._quiet_since = time.monotonic()
        self._shared.changed.publish()
        log.debug("connected to %s", self.addr)
        watchdog = asyncio.ensure_future(self._watch(writer))
        try:
            await self._read_answers(reader)
        finally:
            watchdog.cancel()
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

    async def _watch(self, writer: asyncio.StreamWriter) -> None:
        """Probes the connection while requests are in flight and it has
        been silent for `probe_after`; a probe unanswered within
        `probe_timeout` cuts it (the reader then fails what is pending,
        and the supervisor redials)."""
        shared = self._shared
        while True:
            if self._count == 0:
                self._busy.clear()
                await self._busy.wait()
                continue
            quiet = time.monotonic() - self._quiet_since
            if quiet < shared.probe_after:
                await asyncio.sleep(shared.probe_after - quiet)
                continue
            self.probing = True
            try:
                await self.call(proto.STATUS_LINE, ("S", b""), shared.probe_timeout, probe=True)
            except Unanswered:
                log.warning(
                    "%s did not answer a probe within %.1f s; treating the connection as cut",
                    self.addr, shared.probe_timeout,
                )
                # Not close(): it would wait for a frozen peer to take the
                # bytes still buffered.
                writer.transport.abort()
                return
            except Broken:
                return
            finally:
                self.probing = False

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


async def _handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """`S` on a fresh connection: the node must answer before the
    connection is used (its kernel accepts connections even while the node
    is frozen)."""
    writer.write(proto.STATUS_LINE)
    answer = proto.parse_response((await _read_line(reader))[:-1])
    if answer.kind == "E" and answer.reason.startswith("TLS required"):
        raise _TlsFailure(TLS_REQUIRED)
    # The node would refuse every request: not a usable connection.
    if answer.kind == "E" and answer.reason == "authentication required":
        raise _AuthRefused(errors.AuthenticationRequired())
    if answer.kind not in ("S", "E"):
        raise proto.BadLine("unexpected answer to the S handshake")


async def _read_line(reader: asyncio.StreamReader) -> bytes:
    """One line with its LF, at most 4096 bytes; longer ones break the
    connection (a Baton node never sends them)."""
    try:
        return await reader.readuntil(b"\n")
    except asyncio.LimitOverrunError:
        raise proto.BadLine(f"answer line longer than {proto.MAX_ANSWER_LINE} bytes") from None
