"""Real `batond` processes on free loopback ports, clusters of them, a fault
proxy, and polling helpers. `BATOND_BIN` names the binary (default: the
repository's target/debug/batond)."""

from __future__ import annotations

import os
import secrets
import select
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, List, Optional, Tuple

import pytest

REPO = Path(__file__).resolve().parents[3]


def batond_bin() -> str:
    path = os.environ.get("BATOND_BIN") or str(REPO / "target" / "debug" / "batond")
    if not os.path.isfile(path):
        pytest.fail(f"batond not found at {path}: build it (cargo build -p batond) or set BATOND_BIN")
    return path


def free_ports(n: int) -> List[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_for(cond: Callable[[], object], timeout: float, what: str, every: float = 0.02) -> object:
    """Polls `cond` until it returns something true; fails after `timeout`."""
    end = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > end:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)


class Batond:
    """One batond process; killed at teardown."""

    def __init__(self, args: List[str], listen: str, scratch: str) -> None:
        self.dir = scratch  # its log; the caller removes it
        self.args = list(args)
        self.listen = listen
        self.log = os.path.join(self.dir, "batond.log")
        self.proc: Optional[subprocess.Popen] = None
        self.addr = ""
        self.start()

    def start(self) -> None:
        end = time.monotonic() + 10
        while True:
            if self._spawn():
                return
            if time.monotonic() > end or self.listen.endswith(":0"):
                with open(self.log) as f:
                    pytest.fail(f"batond {self.args} did not start:\n{f.read()[-3000:]}")
            time.sleep(0.1)

    def _spawn(self) -> bool:
        log = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [batond_bin(), "--listen", self.listen, *self.args],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
        )
        log.close()
        assert self.proc.stdout is not None
        end = time.monotonic() + 10
        while time.monotonic() < end:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.1)
            if ready:
                line = self.proc.stdout.readline().decode()
                if line.startswith("listening "):
                    self.addr = line.split()[1]
                    self.listen = self.addr
                    return True
                if not line:
                    break
        self.proc.kill()
        self.proc.wait()
        return False

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self) -> None:
        self.kill()
        self.start()


def status(addr: str, timeout: float = 0.5) -> Optional[dict]:
    """One raw `S` probe; None when the node does not answer."""
    host, port = addr.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as s:
            s.sendall(b"S\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(1024)
                if not chunk:
                    return None
                data += chunk
    except OSError:
        return None
    parts = data.decode().split()
    if not parts or parts[0] != "S":
        return None
    return dict(p.split("=", 1) for p in parts[1:])


class Nodes:
    """The nodes a test started and the scratch directories they use (their
    logs, keys, data directories); `close` kills the nodes, then removes the
    directories, so a run leaves nothing in /tmp."""

    def __init__(self) -> None:
        self.all: List[Batond] = []
        self.dirs: List[str] = []

    def scratch_dir(self, prefix: str) -> str:
        """A fresh directory, removed at teardown."""
        path = tempfile.mkdtemp(prefix=prefix)
        self.dirs.append(path)
        return path

    def close(self) -> None:
        for node in self.all:
            node.kill()
        for path in self.dirs:
            shutil.rmtree(path, ignore_errors=True)

    def start(self, args: List[str], listen: str = "127.0.0.1:0") -> Batond:
        node = Batond(args, listen, self.scratch_dir("baton-py-"))
        self.all.append(node)
        return node

    def cluster(self, n: int, mode: str, extra: Optional[List[str]] = None) -> List[Batond]:
        ports = free_ports(n)
        peers = ",".join(f"127.0.0.1:{p}" for p in ports)
        keydir = self.scratch_dir("baton-key-")
        key = os.path.join(keydir, "cluster.key")
        fd = os.open(key, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, (secrets.token_hex(32) + "\n").encode())
        os.close(fd)
        nodes = []
        for port in ports:
            args = ["--peers", peers, "--mode", mode, "--cluster-key-file", key, *(extra or [])]
            if mode == "raft":
                args += ["--data-dir", self.scratch_dir("baton-raft-")]
            nodes.append(self.start(args, f"127.0.0.1:{port}"))
        return nodes


@pytest.fixture
def nodes():
    n = Nodes()
    yield n
    n.close()


@pytest.fixture
def node(nodes: Nodes) -> Batond:
    return nodes.start([])


def serving(addrs: List[str]) -> Optional[str]:
    """The address of the node that serves clients (active or leader)."""
    for addr in addrs:
        st = status(addr)
        if st and st.get("role") in ("active", "leader", "single"):
            return addr
    return None


def priority_pair(nodes: Nodes) -> Tuple[List[Batond], str, str]:
    """A priority cluster of two once its roles are settled (see
    `settled`): the nodes, the active's address and the standby's."""
    cluster = nodes.cluster(2, "priority")
    addrs = [n.addr for n in cluster]
    active = str(wait_for(lambda: settled(addrs, "priority"), 20, "the first peer active, followed"))
    return cluster, active, addrs[1]


def settled(addrs: List[str], mode: str) -> Optional[str]:
    """The serving node once the roles are settled: every node names it
    (`agreed_leader`), and in a priority cluster it is the first peer (the
    live node highest in the peer order, which takes the role over from a
    lower one active meanwhile). A node just started says `role=standby
    active=-` until it hears the serving node, and may still promote itself
    if its peer link is slow: two actives, until the lower one steps down
    and hands its grants over."""
    leader = agreed_leader(addrs)
    if mode == "priority" and leader != addrs[0]:
        return None
    return leader


def raft_trio(nodes: Nodes) -> Tuple[List[Batond], str]:
    """A Raft cluster of three once every node names the same leader: the
    nodes and the leader's address."""
    cluster = nodes.cluster(3, "raft")
    addrs = [n.addr for n in cluster]
    return cluster, str(wait_for(lambda: agreed_leader(addrs), 20, "an agreed Raft leader"))


def agreed_leader(addrs: List[str]) -> Optional[str]:
    """The serving node (Raft leader, priority active) every node of
    `addrs` names (`active=`), if one serves and the others follow it."""
    statuses = [status(a) for a in addrs]
    leaders = [a for a, st in zip(addrs, statuses) if st and st.get("role") in ("leader", "active")]
    if len(leaders) != 1 or not all(st and st.get("active") == leaders[0] for st in statuses):
        return None
    return leaders[0]


def in_thread(call: Callable[[], object]) -> Tuple[threading.Thread, dict]:
    """Runs `call` in a thread; the dict gets its result or its error."""
    out: dict = {}

    def run() -> None:
        try:
            out["result"] = call()
        except Exception as err:  # reported by the test that reads `out`
            out["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


class FaultProxy:
    """A TCP proxy to `target` that can cut every connection and refuse new ones."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.server = socket.socket()
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(64)
        self.addr = f"127.0.0.1:{self.server.getsockname()[1]}"
        self.refusing = False
        self.accepted = 0
        self.bytes_up = 0
        self.conns: List[socket.socket] = []
        self.mutex = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            if self.refusing:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=2)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self.mutex:
                # A cut that came while this one was being connected
                # upstream covers it too.
                if self.refusing or self.closed:
                    client.close()
                    upstream.close()
                    continue
                self.accepted += 1
                self.conns += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, up: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if up:
                    with self.mutex:
                        self.bytes_up += len(data)
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def cut(self, refuse: bool = False) -> None:
        with self.mutex:
            self.refusing = refuse
            conns, self.conns = self.conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self.closed = True
        self.cut()
        self.server.close()


@pytest.fixture
def proxies():
    made: List[FaultProxy] = []

    def make(target: str) -> FaultProxy:
        p = FaultProxy(target)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()
