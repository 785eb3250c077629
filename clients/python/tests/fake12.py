"""A fake cluster speaking protocol 1.2 (docs/protocol.md): semaphores, shared locks, holder values, `V`, the
extended `Q`, `W` watches answered oldest first, `M` redirects from the
nodes that do not serve, fail-over (the old active answers its pending
watches `M W <key> <addr|->`), cuts, frozen nodes, and a 1.1 mode. Every node runs on one
asyncio loop in a thread of its own (blocking clients can use it too) and
shares one store of keys. Leases are reported, not expired. Every line a
node receives is kept."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional

import pytest

#: What a node waits for a `W <key> 0 ...` (the node's maximum wait).
MAX_WAIT = 60.0


@dataclass
class Grant:
    token: int
    shared: bool
    value: Optional[str]
    lease: str


@dataclass
class Waiter:
    conn: "Conn"
    shared: bool
    value: Optional[str]
    lease: str
    timer: Optional[asyncio.TimerHandle] = None


@dataclass
class Watcher:
    conn: "Conn"
    seen: str
    timer: Optional[asyncio.TimerHandle] = None


@dataclass
class Key:
    permits: int = 1
    grants: Dict[int, Grant] = field(default_factory=dict)
    queue: Deque[Waiter] = field(default_factory=deque)
    watchers: List[Watcher] = field(default_factory=list)


@dataclass
class Conn:
    node: "FakeNode"
    writer: asyncio.StreamWriter

    def send(self, line: str) -> None:
        if not self.writer.is_closing() and not self.node.frozen:
            self.writer.write(line.encode("utf-8", "surrogateescape") + b"\n")


def fnv(text: str) -> str:
    h = 0xCBF29CE484222325
    for b in text.encode("utf-8", "surrogateescape"):
        h = ((h ^ b) * 0x100000001B3) % 2**64
    return f"{h:016x}"


class FakeNode:
    def __init__(self, cluster: "FakeCluster", server: Any) -> None:
        self.cluster = cluster
        self.server = server
        self.addr = "127.0.0.1:%d" % server.sockets[0].getsockname()[1]
        self.lines: List[str] = []
        self.conns: List[Conn] = []
        #: Answers `E ? ? unknown op` to V and W, and `too many fields` to options.
        self.old = False
        #: Keys prefixed so are refused `permission denied`.
        self.denied = "secret/"
        #: Watches past this many, on this node, are refused.
        self.max_watches = 1000
        #: Reads requests and answers none, like a stopped process.
        self.frozen = False

    def received(self, op: str) -> List[str]:
        return [line for line in list(self.lines) if line.split(" ")[0] == op]


class FakeCluster:
    def __init__(self, n: int) -> None:
        self.loop = asyncio.new_event_loop()
        self.keys: Dict[str, Key] = {}
        self.tokens = itertools.count(1001)
        self.nodes: List[FakeNode] = []
        self.active: Optional[int] = 0
        #: Requests received while one of the same op and key was pending on
        #: the same connection (a client must never send them).
        self.overlaps: List[str] = []
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(n, ready), daemon=True)
        self.thread.start()
        assert ready.wait(5), "the fake cluster did not start"

    def _run(self, n: int, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        for _ in range(n):
            holder: List[FakeNode] = []
            server = self.loop.run_until_complete(
                asyncio.start_server(
                    lambda r, w, h=holder: self._serve(h[0], r, w), "127.0.0.1", 0
                )
            )
            holder.append(FakeNode(self, server))
            self.nodes.append(holder[0])
        ready.set()
        self.loop.run_forever()
        pending = asyncio.all_tasks(self.loop)
        for task in pending:
            task.cancel()
        self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self.loop.close()

    def addrs(self) -> List[str]:
        return [node.addr for node in self.nodes]

    def run(self, fn: Callable[[], Any]) -> Any:
        """Runs `fn` on the fake's loop and returns what it returns."""

        async def call() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(5)

    def close(self) -> None:
        def stop() -> None:
            for node in self.nodes:
                node.server.close()
                for conn in node.conns:
                    conn.writer.close()
            self.loop.stop()

        self.loop.call_soon_threadsafe(stop)
        self.thread.join(5)

    # Faults.

    def cut(self, index: int) -> None:
        """Closes every connection of node `index` (the client redials)."""
        self.run(lambda: [c.writer.transport.abort() for c in self.nodes[index].conns])

    def fail_over(self, to: Optional[int]) -> None:
        """The active node stops serving: it answers its pending watches
        `M W <key> <new active|->`; `to` serves from now on."""

        def move() -> None:
            old = self.active
            self.active = to
            target = "-" if to is None else self.nodes[to].addr
            for name, key in self.keys.items():
                for watcher in list(key.watchers):
                    if old is not None and watcher.conn.node is self.nodes[old]:
                        self._drop_watcher(key, watcher)
                        watcher.conn.send(f"M W {name} {target}")

        self.run(move)

    # Serving.

    async def _serve(self, node: FakeNode, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Conn(node, writer)
        node.conns.append(conn)
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                text = line.decode("utf-8", "surrogateescape").rstrip("\n")
                node.lines.append(text)
                answer = self._answer(conn, text.split(" "))
                if answer:
                    conn.send(answer)
        except (ConnectionError, OSError):
            pass
        finally:
            node.conns.remove(conn)
            self._forget(conn)
            writer.close()

    def _forget(self, conn: Conn) -> None:
        """A closed connection's waiters and watches leave."""
        for key in self.keys.values():
            for waiter in [w for w in key.queue if w.conn is conn]:
                key.queue.remove(waiter)
                if waiter.timer:
                    waiter.timer.cancel()
            for watcher in [w for w in key.watchers if w.conn is conn]:
                self._drop_watcher(key, watcher)

    def _answer(self, conn: Conn, f: List[str]) -> Optional[str]:
        node = conn.node
        op = f[0]
        if op == "S":
            return "S role=single mode=single protocol=1.2 version=fake"
        if node.old and op in ("V", "W"):
            return "E ? ? unknown op"
        if op not in ("A", "R", "K", "Q", "V", "W"):
            return "E ? ? unknown op"
        if len(f) < 2:
            return f"E {op} ? missing key"
        name = f[1]
        if self.active is None or node is not self.nodes[self.active]:
            return f"M {op} {name} {'-' if self.active is None else self.nodes[self.active].addr}"
        if name.startswith(node.denied):
            return f"E {op} {name} permission denied"
        handler = getattr(self, "_op_" + op)
        answer: Optional[str] = handler(conn, name, f[2:])
        return answer

    def _key(self, name: str) -> Key:
        return self.keys.setdefault(name, Key())

    def _op_A(self, conn: Conn, name: str, f: List[str]) -> Optional[str]:
        if conn.node.old and len(f) > 2:
            return f"E A {name} too many fields"
        wait, lease, options = float(f[0]), f[1], dict(o.split("=", 1) for o in f[2:])
        permits = int(options.get("permits", "1"))
        shared = options.get("mode") == "shared"
        key = self._key(name)
        if any(w.conn is conn for w in key.queue):
            self.overlaps.append(f"A {name}")
        if (key.grants or key.queue) and (permits != key.permits or (shared and key.permits > 1)):
            return f"E A {name} the key has {key.permits} permits"
        key.permits = permits
        waiter = Waiter(conn, shared, options.get("value"), lease)
        if not key.queue and self._fits(key, waiter):
            return self._grant(name, key, waiter)
        key.queue.append(waiter)
        waiter.timer = self.loop.call_later(wait or MAX_WAIT, self._time_out, name, key, waiter)
        return None

    def _time_out(self, name: str, key: Key, waiter: Waiter) -> None:
        if waiter in key.queue:
            key.queue.remove(waiter)
            waiter.conn.send(f"T {name}")

    def _fits(self, key: Key, waiter: Waiter) -> bool:
        grants = list(key.grants.values())
        if waiter.shared:
            return all(g.shared for g in grants)
        return len(grants) < key.permits and not any(g.shared for g in grants)

    def _grant(self, name: str, key: Key, waiter: Waiter) -> str:
        token = next(self.tokens)
        key.grants[token] = Grant(token, waiter.shared, waiter.value, waiter.lease)
        self._changed(name, key)
        return f"A {name} {token}"

    def _serve_queue(self, name: str, key: Key) -> None:
        while key.queue and self._fits(key, key.queue[0]):
            waiter = key.queue.popleft()
            if waiter.timer:
                waiter.timer.cancel()
            waiter.conn.send(self._grant(name, key, waiter))

    def _op_R(self, conn: Conn, name: str, f: List[str]) -> str:
        key = self._key(name)
        if key.grants.pop(int(f[0]), None) is None:
            return f"N R {name}"
        self._changed(name, key)
        self._serve_queue(name, key)
        return f"R {name}"

    def _op_K(self, conn: Conn, name: str, f: List[str]) -> str:
        return f"K {name}" if int(f[0]) in self._key(name).grants else f"N K {name}"

    def _op_V(self, conn: Conn, name: str, f: List[str]) -> str:
        key = self._key(name)
        grant = key.grants.get(int(f[0]))
        if grant is None:
            return f"N V {name}"
        grant.value = None if f[1] == "-" else f[1]
        self._changed(name, key)
        return f"V {name}"

    def _op_Q(self, conn: Conn, name: str, f: List[str]) -> str:
        return "Q " + self.state(name)

    def _op_W(self, conn: Conn, name: str, f: List[str]) -> Optional[str]:
        if sum(len(k.watchers) for k in self.keys.values()) >= conn.node.max_watches:
            return f"E W {name} too many watches"
        key = self._key(name)
        wait, seen = float(f[0]), f[1]
        if any(w.conn is conn for w in key.watchers):
            self.overlaps.append(f"W {name}")
        if self.tag(key) != seen:
            # Answered now, ahead of older watches of the key that wait.
            return "W " + self.state(name, tagged=True)
        watcher = Watcher(conn, seen)
        watcher.timer = self.loop.call_later(wait or MAX_WAIT, self._answer_watcher, name, key, watcher)
        key.watchers.append(watcher)
        return None

    def _answer_watcher(self, name: str, key: Key, watcher: Watcher) -> None:
        if watcher in key.watchers:
            self._drop_watcher(key, watcher)
            watcher.conn.send("W " + self.state(name, tagged=True))

    def _drop_watcher(self, key: Key, watcher: Watcher) -> None:
        key.watchers.remove(watcher)
        if watcher.timer:
            watcher.timer.cancel()

    def _changed(self, name: str, key: Key) -> None:
        for watcher in list(key.watchers):
            self._answer_watcher(name, key, watcher)

    # What Q and W report.

    @staticmethod
    def plain(key: Key) -> bool:
        grants = list(key.grants.values())
        return key.permits == 1 and len(grants) <= 1 and all(
            not g.shared and g.value is None for g in grants
        )

    def tag(self, key: Key) -> str:
        if not key.grants:
            return "-"
        newest = max(key.grants)
        if self.plain(key):
            return str(newest)
        text = ";".join(f"{g.token},{g.shared},{g.value}" for g in sorted(key.grants.values(), key=lambda g: g.token))
        return f"{newest}.{len(key.grants)}.{fnv(text)}"

    def state(self, name: str, tagged: bool = False) -> str:
        key = self._key(name)
        grants = sorted(key.grants.values(), key=lambda g: g.token)
        head = (
            f"{name} token={grants[-1].token} lease={grants[-1].lease}" if grants else f"{name} token=- lease=-"
        ) + f" waiters={len(key.queue)}"
        if self.plain(key):
            return head + (f" state={self.tag(key)}" if tagged else "")
        mode = "shared" if any(g.shared for g in grants) else "exclusive"
        holders = "".join(f" holder={g.token},{g.lease},{g.value or '-'}" for g in grants[:16])
        return f"{head} permits={key.permits} mode={mode} holders={len(grants)}{holders} state={self.tag(key)}"


@pytest.fixture
def fake_cluster() -> Iterator[Callable[[int], FakeCluster]]:
    """Makes fake 1.2 clusters (`fake_cluster(n)`), closed at teardown."""
    made: List[FakeCluster] = []

    def make(n: int = 1) -> FakeCluster:
        cluster = FakeCluster(n)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.close()


__all__ = ["FakeCluster", "FakeNode", "fake_cluster"]
