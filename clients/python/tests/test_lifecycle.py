"""A client's life: addresses checked when it is made, locks released when a
program exits or drops its client without close(), a forked child and a
second event loop told what they did wrong, errors of background work
logged."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import subprocess
import sys
import textwrap
import time

import pytest

import baton
from conftest import wait_for
from scripted import fakes  # noqa: F401 (a fixture)


def test_comma_joined_addresses_are_accepted(fakes):
    a, b = fakes(), fakes()
    with baton.Client(f"{a.addr},{b.addr}") as client:
        assert [st.addr for st in client.status()] == [a.addr, b.addr]
    with baton.Client([f"{a.addr}, {b.addr}"]) as client:
        assert len(client.status()) == 2


@pytest.mark.parametrize("bad", ["a..b:7411", "-a:1", "[not-v6]:1", "a b:1", ",", "h:1,"])
def test_a_malformed_address_is_refused_when_the_client_is_made(bad):
    with pytest.raises(baton.InvalidArgument):
        baton.Client(bad)
    with pytest.raises(baton.InvalidArgument):
        baton.aio.Client([bad])


def test_the_package_logger_has_a_null_handler():
    handlers = logging.getLogger("baton").handlers
    assert any(isinstance(h, logging.NullHandler) for h in handlers)


def test_a_failed_background_release_is_logged_as_a_warning(fakes, caplog):
    node = fakes(script=lambda f: {"A": "", "R": f"E R {f[-1]} refused by the script"}.get(f[0]))

    async def main():
        async with baton.aio.Client([node.addr]) as client:
            waiting = asyncio.ensure_future(client.acquire("orphan", 5, 30))
            while not node.received("A"):
                await asyncio.sleep(0.01)
            waiting.cancel()
            node.push("A orphan 4242")  # the grant comes for nobody
            end = time.monotonic() + 5
            while not node.received("R"):
                assert time.monotonic() < end, "the orphan grant was not released"
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)

    with caplog.at_level(logging.WARNING, logger="baton"):
        asyncio.run(main())
    assert any(r.levelno == logging.WARNING and "background release" in r.getMessage()
               for r in caplog.records), caplog.text


def test_an_async_on_lost_that_raises_is_logged(fakes, caplog):
    node = fakes(script=lambda f: f"N K {f[1]}" if f[0] == "K" else None)

    async def on_lost(lock):
        raise RuntimeError("the callback's own bug")

    async def main():
        async with baton.aio.Client([node.addr]) as client:
            lock = await client.acquire("k", 1, 30, on_lost=on_lost)
            with pytest.raises(baton.LeaseLost):
                await lock.renew()
            await asyncio.sleep(0.1)
            gc.collect()

    with caplog.at_level(logging.ERROR):
        asyncio.run(main())
    gc.collect()
    assert any("on_lost callback" in r.getMessage() and r.exc_info for r in caplog.records), caplog.text
    assert "never retrieved" not in caplog.text


# A blocking client runs a thread, which Python 3.12+ warns about at fork():
# that is the case under test.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_is_told_to_make_its_own_client(node):
    with baton.Client([node.addr]) as client:
        lock = client.acquire("fork/k", 5, 30)
        pid = os.fork()
        if pid == 0:  # the child: never return into pytest
            code = 1
            try:
                client.inspect("fork/k")
            except baton.ForkedClient as err:
                code = 0 if "fork" in str(err) else 4
            except BaseException:
                code = 2
            try:
                client.close()  # the parent's: nothing to do here
                baton.aio._lifetime.release_at_exit()
            except BaseException:
                code = 3
            os._exit(code)
        _, st = os.waitpid(pid, 0)
        assert os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0, st
        # The parent's client and lock are untouched.
        assert client.inspect("fork/k").token == lock.token


def test_an_async_client_on_a_second_event_loop_is_told_so(node):
    client = baton.aio.Client([node.addr])
    first = asyncio.new_event_loop()
    try:
        lock = first.run_until_complete(client.acquire("loop/k", 5, 30))

        async def elsewhere():
            with pytest.raises(baton.WrongEventLoop, match="event loop"):
                await client.inspect("loop/k")

        asyncio.run(elsewhere())
        first.run_until_complete(lock.release())
        first.run_until_complete(client.close())
    finally:
        first.close()


EXIT_SCRIPTS = {
    "blocking": """
        import baton
        client = baton.Client([ADDR])
        client.acquire("exit/blocking", 5, 60, keep_alive=True)
        print("held", flush=True)
    """,
    "asyncio": """
        import asyncio, baton
        async def main():
            client = baton.aio.Client([ADDR])
            await client.acquire("exit/asyncio", 5, 60)
            print("held", flush=True)
        asyncio.run(main())
    """,
    # Collected after its loop closed: released at exit all the same.
    "collected": """
        import asyncio, gc, baton
        async def main():
            client = baton.aio.Client([ADDR])
            await client.acquire("exit/collected", 5, 60)
        asyncio.run(main())
        gc.collect()
        print("held", flush=True)
    """,
}


@pytest.mark.parametrize("kind", sorted(EXIT_SCRIPTS))
def test_locks_left_at_exit_are_released(node, kind):
    script = textwrap.dedent(EXIT_SCRIPTS[kind]).replace("ADDR", repr(node.addr))
    script = "import logging; logging.basicConfig()\n" + script
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "held" in done.stdout, done.stderr
    assert "still held at exit" in done.stderr, done.stderr
    with baton.Client([node.addr]) as observer:
        assert not observer.inspect(f"exit/{kind}").held, "released at exit, not after its 60 s lease"


def test_a_dropped_blocking_client_releases_its_keep_alive_lock(node):
    def take():
        client = baton.Client([node.addr])
        client.acquire("drop/blocking", 5, 30, keep_alive=True)

    take()
    gc.collect()
    with baton.Client([node.addr]) as observer:
        wait_for(lambda: not observer.inspect("drop/blocking").held, 5, "the dropped client's release")


def test_a_dropped_async_client_releases_its_keep_alive_lock(node):
    async def take():
        client = baton.aio.Client([node.addr])
        await client.acquire("drop/asyncio", 5, 30, keep_alive=True)

    async def main():
        await take()
        gc.collect()
        async with baton.aio.Client([node.addr]) as observer:
            end = time.monotonic() + 5
            while (await observer.inspect("drop/asyncio")).held:
                assert time.monotonic() < end, "the dropped client still holds its lock"
                await asyncio.sleep(0.05)

    asyncio.run(main())
