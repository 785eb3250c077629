"""The Python client, blocking and asyncio, through the client-behaviour
suite: every scenario in tests/client-behaviour/ is played by the scripted
node (crates/script-node, `SCRIPT_NODE_BIN`) while this adapter drives a
client as the node tells it. The adapter protocol is in
tests/client-behaviour/README.md."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import ssl
import subprocess
import threading
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

import baton
import baton.aio

REPO = Path(__file__).resolve().parents[3]
SCENARIOS = REPO / "tests" / "client-behaviour"
#: Scenarios played at once: they pace themselves with generous bounds, so
#: a few side by side stay well within them on two cores.
AT_ONCE = 3
#: A scenario's whole run, past which the adapter gives up on the node.
SCENARIO_LIMIT = 180.0
#: How often `lost` looks at the lock, for the blocking client.
LOST_POLL = 0.01

#: Scenarios a mode cannot play, and why: the node says `verdict skip` for
#: them, and must not for any other.
EXPECTED_SKIPS: Dict[str, Dict[str, str]] = {
    "sync": {
        "given-up-acquire": "a blocking call cannot be cancelled from another thread",
        "one-acquire-per-key": "a blocking call cannot be cancelled from another thread",
    },
    "aio": {},
}


def script_node() -> str:
    path = os.environ.get("SCRIPT_NODE_BIN") or str(REPO / "target" / "debug" / "script-node")
    if not os.path.isfile(path):
        pytest.fail(f"script-node not found at {path}: cargo build --bin script-node, or set SCRIPT_NODE_BIN")
    return path


def scenarios() -> List[str]:
    return sorted(p.stem for p in SCENARIOS.glob("*.scn"))


def kind(err: BaseException) -> str:
    """The suite's name for an error (docs/clients.md, "Errors")."""
    table = [
        (baton.TimedOut, "timed-out"),
        (baton.Unanswered, "unanswered"),
        (baton.NoServer, "no-server"),
        (baton.NotHeld, "not-held"),
        (baton.LeaseLost, "lease-lost"),
        (baton.Rejected, "rejected"),
        (baton.AuthenticationNotEnabled, "auth-not-enabled"),
        (baton.AuthenticationFailed, "auth-failed"),
        (baton.AuthenticationRequired, "auth-required"),
        (baton.PermissionDenied, "permission-denied"),
        (baton.TlsError, "tls"),
        (baton.InvalidArgument, "invalid"),
        (baton.Closed, "closed"),
        (baton.UnexpectedAnswer, "unexpected"),
    ]
    for cls, name in table:
        if isinstance(err, cls):
            return name
    return f"unknown {type(err).__name__}"


def args_of(text: str) -> Dict[str, str]:
    return dict(w.split("=", 1) for w in text.split(" ") if "=" in w)


def client_options(args: Dict[str, str]) -> Dict[str, Any]:
    options: Dict[str, Any] = {}
    if "user" in args:
        options["user"], options["secret"] = args["user"], args.get("secret", "")
    if "tls-ca" in args:
        options["tls"] = ssl.create_default_context(cafile=args["tls-ca"])
    if "unresponsive-after" in args:
        options["unresponsive_timeout"] = int(args["unresponsive-after"]) / 1000
    return options


def state_words(state: baton.KeyState) -> str:
    if state.token is None:
        return f"free waiters={state.waiters}"
    return f"held token={state.token} waiters={state.waiters}"


def status_words(nodes: List[baton.NodeStatus]) -> str:
    words = ["up" if n.ok else kind(n.error) if n.error else "unknown" for n in nodes]
    return "status " + " ".join(words)


class Node:
    """One script-node process: its orders in, our reports out."""

    def __init__(self, scenario: str) -> None:
        self.proc = subprocess.Popen(
            [script_node(), str(SCENARIOS / f"{scenario}.scn")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, bufsize=1,
        )
        self._write = threading.Lock()
        self.transcript = ""
        self._stderr = threading.Thread(target=self._read_stderr, daemon=True)
        self._stderr.start()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        self.transcript = self.proc.stderr.read()

    def orders(self) -> Any:
        assert self.proc.stdout is not None
        return iter(self.proc.stdout.readline, "")

    def report(self, id: str, outcome: str) -> None:
        with self._write:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(f"done {id} {outcome}\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass

    def finish(self) -> str:
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._stderr.join(5)
        return self.transcript


def judge(scenario: str, mode: str, verdict: str, transcript: str) -> None:
    expected = EXPECTED_SKIPS[mode].get(scenario)
    if verdict == "verdict pass" and expected is None:
        return
    if verdict.startswith("verdict skip") and expected is not None:
        pytest.skip(f"{mode}: {expected}")
    pytest.fail(f"{scenario} ({mode}): {verdict}\n{transcript}", pytrace=False)


# The blocking client: each action in a thread of its own.


class SyncAdapter:
    def __init__(self, node: Node) -> None:
        self.node = node
        self.client: Optional[baton.Client] = None
        self.locks: Dict[str, baton.Lock] = {}

    def run(self) -> str:
        timer = threading.Timer(SCENARIO_LIMIT, self.node.proc.kill)
        timer.start()
        try:
            for line in self.node.orders():
                verb, _, rest = line.rstrip("\n").partition(" ")
                if verb == "verdict":
                    return line.strip()
                if verb == "do":
                    id, _, action = rest.partition(" ")
                    threading.Thread(target=self._act, args=(id, action), daemon=True).start()
                elif verb == "cancel":
                    self.node.report(rest, "unsupported cancel")
            return "verdict fail the node ended without a verdict"
        finally:
            timer.cancel()

    def _act(self, id: str, action: str) -> None:
        try:
            outcome = self._outcome(id, action)
        except baton.Error as err:
            outcome = kind(err)
        except Exception as err:  # the adapter's own mistake: shown, not hidden
            outcome = f"unexpected {type(err).__name__}: {err}"
        self.node.report(id, outcome)

    def _outcome(self, id: str, action: str) -> str:
        name, _, rest = action.partition(" ")
        args = args_of(rest)
        if name == "connect":
            self.client = baton.Client(args["servers"], **client_options(args))
            return "connected"
        client = self.client
        if client is None:
            return "unexpected no client: connect first"
        key = args.get("key", "")
        if name in ("acquire", "try-acquire"):
            if name == "acquire":
                lock: Optional[baton.Lock] = client.acquire(key, float(args["wait"]), float(args["lease"]))
            else:
                lock = client.try_acquire(key, float(args["lease"]))
            if lock is None:
                return "timed-out"
            self.locks[id] = lock
            return f"granted {lock.token}"
        if name == "release":
            if "lock" in args:
                self.locks.pop(args["lock"]).release()
            else:
                client.release(key, int(args["token"]))
            return "ok"
        if name == "renew":
            if "lock" in args:
                self.locks[args["lock"]].renew(float(args["lease"]))
            else:
                client.renew(key, int(args["token"]), float(args["lease"]))
            return "ok"
        if name == "keep-alive":
            self.locks[args["lock"]].keep_alive()
            return "ok"
        if name == "lost":
            self.locks[args["lock"]].lost.wait()
            return "lost"
        if name == "query":
            return state_words(client.inspect(key))
        if name == "status":
            return status_words(client.status())
        if name == "close":
            client.close()
            return "ok"
        return f"unsupported {name}"


# The asyncio client: each action a task.


class AioAdapter:
    def __init__(self, node: Node) -> None:
        self.node = node
        self.client: Optional[baton.aio.Client] = None
        self.locks: Dict[str, baton.aio.Lock] = {}
        self.tasks: Dict[str, "asyncio.Task[None]"] = {}

    async def run(self) -> str:
        loop = asyncio.get_running_loop()
        orders: "asyncio.Queue[str]" = asyncio.Queue()

        def read() -> None:
            for line in self.node.orders():
                loop.call_soon_threadsafe(orders.put_nowait, line)
                if line.startswith("verdict"):
                    return
            loop.call_soon_threadsafe(orders.put_nowait, "")

        threading.Thread(target=read, daemon=True).start()
        while True:
            line = await asyncio.wait_for(orders.get(), SCENARIO_LIMIT)
            if not line:
                return "verdict fail the node ended without a verdict"
            verb, _, rest = line.rstrip("\n").partition(" ")
            if verb == "verdict":
                return line.strip()
            if verb == "do":
                id, _, action = rest.partition(" ")
                self.tasks[id] = asyncio.ensure_future(self._act(id, action))
            elif verb == "cancel":
                task = self.tasks.get(rest)
                if task is not None and not task.done():
                    task.cancel()

    async def _act(self, id: str, action: str) -> None:
        try:
            outcome = await self._outcome(id, action)
        except asyncio.CancelledError:
            outcome = "cancelled"
        except baton.Error as err:
            outcome = kind(err)
        except Exception as err:  # the adapter's own mistake: shown, not hidden
            outcome = f"unexpected {type(err).__name__}: {err}"
        self.node.report(id, outcome)

    async def _outcome(self, id: str, action: str) -> str:
        name, _, rest = action.partition(" ")
        args = args_of(rest)
        if name == "connect":
            client = baton.aio.Client(args["servers"], **client_options(args))
            await client.connect()
            self.client = client
            return "connected"
        if self.client is None:
            return "unexpected no client: connect first"
        return await self._call(self.client, id, name, args)

    async def _call(self, client: baton.aio.Client, id: str, name: str, args: Dict[str, str]) -> str:
        key = args.get("key", "")
        if name in ("acquire", "try-acquire"):
            if name == "acquire":
                lock: Optional[baton.aio.Lock] = await client.acquire(
                    key, float(args["wait"]), float(args["lease"])
                )
            else:
                lock = await client.try_acquire(key, float(args["lease"]))
            if lock is None:
                return "timed-out"
            self.locks[id] = lock
            return f"granted {lock.token}"
        if name == "release":
            if "lock" in args:
                await self.locks.pop(args["lock"]).release()
            else:
                await client.release(key, int(args["token"]))
            return "ok"
        if name == "renew":
            if "lock" in args:
                await self.locks[args["lock"]].renew(float(args["lease"]))
            else:
                await client.renew(key, int(args["token"]), float(args["lease"]))
            return "ok"
        if name == "keep-alive":
            self.locks[args["lock"]].keep_alive()
            return "ok"
        if name == "lost":
            await self.locks[args["lock"]].lost.wait()
            return "lost"
        if name == "query":
            return state_words(await client.inspect(key))
        if name == "status":
            return status_words(await client.status())
        if name == "close":
            await client.close()
            return "ok"
        return f"unsupported {name}"


def close_quietly(client: baton.Client) -> None:
    try:
        client.close()
    except baton.Error:
        pass


def play_blocking(scenario: str) -> Tuple[str, str]:
    node = Node(scenario)
    adapter = SyncAdapter(node)
    verdict = adapter.run()
    transcript = node.finish()
    if adapter.client is not None:
        # Its nodes are gone: closing may retry releases for 5 s, not waited for.
        threading.Thread(target=close_quietly, args=(adapter.client,), daemon=True).start()
    return verdict, transcript


def play_asyncio(scenario: str) -> Tuple[str, str]:
    node = Node(scenario)

    async def main() -> str:
        adapter = AioAdapter(node)
        try:
            return await adapter.run()
        finally:
            for task in adapter.tasks.values():
                task.cancel()
            client = adapter.client
            if client is not None:
                try:
                    await asyncio.wait_for(client.close(), 1.0)
                except BaseException:
                    pass

    verdict = asyncio.run(main())
    return verdict, node.finish()


#: The tests, the mode each plays, and how.
MODES = {
    "test_blocking_client_behaviour": ("sync", play_blocking),
    "test_asyncio_client_behaviour": ("aio", play_asyncio),
}
Played = Dict[Tuple[str, str], Tuple[str, str]]


@pytest.fixture(scope="module")
def played(request: pytest.FixtureRequest) -> Played:
    """Plays every selected scenario, a few at once (each paces itself
    with generous bounds); the tests then judge one verdict each."""
    wanted = []
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        mode = MODES.get(getattr(item, "originalname", ""))
        if callspec is not None and mode is not None:
            wanted.append((mode[0], callspec.params["scenario"], mode[1]))
    with concurrent.futures.ThreadPoolExecutor(AT_ONCE) as pool:
        verdicts = pool.map(lambda w: w[2](w[1]), wanted)
        return {(mode, scenario): verdict for (mode, scenario, _), verdict in zip(wanted, verdicts)}


@pytest.mark.parametrize("scenario", scenarios())
def test_blocking_client_behaviour(scenario: str, played: Played) -> None:
    judge(scenario, "sync", *played[("sync", scenario)])


@pytest.mark.parametrize("scenario", scenarios())
def test_asyncio_client_behaviour(scenario: str, played: Played) -> None:
    judge(scenario, "aio", *played[("aio", scenario)])
