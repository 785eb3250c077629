"""A scripted fake node: an asyncio server on 127.0.0.1, in a thread of its
own (so blocking clients can use it too), that speaks just enough of the
protocol (S, A, R, K, Q) and can be frozen, like a stopped process: it
then reads requests and answers none. Every line it receives is kept."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Callable, Iterator, List, Optional

import pytest

#: What a node answers to one request line: None for its usual answer,
#: "" for no answer at all.
Script = Callable[[List[str]], Optional[str]]


class ScriptedNode:
    def __init__(self, port: int = 0, token_base: int = 1000, script: Optional[Script] = None) -> None:
        self.token = token_base
        self.script = script
        self.frozen = threading.Event()
        self.lines: List[str] = []
        self.accepted = 0
        self.closed_by_client = 0
        self._writers: List[asyncio.StreamWriter] = []
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(port, ready), daemon=True)
        self._thread.start()
        assert ready.wait(5), "the scripted node did not start"
        self.addr = f"127.0.0.1:{self.port}"

    def _run(self, port: int, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", port, reuse_address=True)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        ready.set()
        self._loop.run_forever()
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._writers.append(writer)
        try:
            while True:
                line = await reader.readline()
                if not line:
                    self.closed_by_client += 1
                    return
                text = line.decode().rstrip("\n")
                self.lines.append(text)
                if self.frozen.is_set():
                    continue
                answer = self._answer(text.split(" "))
                if answer:
                    writer.write(answer.encode() + b"\n")
        except (ConnectionError, OSError):
            self.closed_by_client += 1
        finally:
            writer.close()

    def _answer(self, fields: List[str]) -> Optional[str]:
        if self.script is not None:
            scripted = self.script(fields)
            if scripted is not None:
                return scripted
        op = fields[0]
        if op == "S":
            return "S role=single mode=single token=%d" % self.token
        if op == "A":
            self.token += 1
            return f"A {fields[1]} {self.token}"
        if op in ("R", "K"):
            return f"{op} {fields[1]}"
        if op == "Q":
            return f"Q {fields[1]} token=- lease=- waiters=0"
        return f"E {op} ? unknown"

    def push(self, line: str) -> None:
        """Sends `line` on every open connection."""

        def send() -> None:
            for writer in self._writers:
                if not writer.is_closing():
                    writer.write(line.encode() + b"\n")

        self._loop.call_soon_threadsafe(send)

    def received(self, op: str) -> List[str]:
        return [line for line in list(self.lines) if line.split(" ")[0] == op]

    def close(self) -> None:
        def stop() -> None:
            self._server.close()
            for writer in self._writers:
                writer.close()
            self._loop.stop()

        self._loop.call_soon_threadsafe(stop)
        self._thread.join(5)


def reserved_port() -> int:
    """A loopback port nothing listens on (yet)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def poll(cond: Callable[[], object], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.01)


@pytest.fixture
def fakes() -> Iterator[Callable[..., ScriptedNode]]:
    """Makes scripted nodes (`fakes(token_base=..., script=..., port=...)`),
    closed at teardown."""
    made: List[ScriptedNode] = []

    def make(**kw: object) -> ScriptedNode:
        node = ScriptedNode(**kw)  # type: ignore[arg-type]
        made.append(node)
        return node

    yield make
    for node in made:
        node.close()


__all__ = ["ScriptedNode", "Script", "fakes", "reserved_port", "poll"]
