"""Connections: two for one address, round-robin, a broken one redialled in
the background every 3 s, pipelining, release retried across a cut, an
abandoned acquire's late grant released at once, acquire failover."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import baton
from conftest import wait_for


def test_two_connections_for_one_address_and_round_robin(node, proxies):
    one = proxies(node.addr)
    with baton.Client([one.addr]) as client:
        client.inspect("k")
        wait_for(lambda: one.accepted == 2, 5, "two connections")
    a, b = proxies(node.addr), proxies(node.addr)
    with baton.Client([a.addr, b.addr]) as client:
        wait_for(lambda: a.accepted == 1 and b.accepted == 1, 5, "one connection each")
        start_a, start_b = a.bytes_up, b.bytes_up
        for i in range(10):
            client.inspect(f"k{i}")
        assert a.bytes_up - start_a == b.bytes_up - start_b > 0


def test_broken_connection_leaves_rotation_and_is_redialled(node, proxies):
    a, b = proxies(node.addr), proxies(node.addr)
    with baton.Client([a.addr, b.addr]) as client:
        # Both connections through their proxies before the cut: the
        # redial is then the second connection `a` takes.
        wait_for(lambda: a.accepted == 1 and b.accepted == 1, 5, "one connection each")
        a.cut(refuse=True)
        # Served at once by the other connection meanwhile.
        start = time.monotonic()
        for i in range(20):
            assert not client.inspect(f"k{i}").held
        assert time.monotonic() - start < 2
        a.refusing = False
        cut_at = time.monotonic()
        wait_for(lambda: a.accepted >= 2, 8, "the redial")
        assert time.monotonic() - cut_at <= 4.5


def test_pipelining_many_requests_on_one_connection(node):
    async def main():
        async with baton.aio.Client([node.addr]) as client:
            locks = await asyncio.gather(*(client.acquire(f"p/{i}", 5, 30) for i in range(500)))
            tokens = [l.token for l in locks]
            assert len(set(tokens)) == 500
            states = await asyncio.gather(*(client.inspect(f"p/{i}") for i in range(500)))
            assert [s.token for s in states] == tokens
            await asyncio.gather(*(l.release() for l in locks))
            # Same (op, key) pipelined: answered oldest first.
            first = await client.acquire("same", 5, 30)
            second = asyncio.ensure_future(client.acquire("same", 5, 30))
            third = asyncio.ensure_future(client.acquire("same", 5, 30))
            await wait_async(lambda: client.inspect("same"), lambda s: s.waiters == 2)
            await first.release()
            done, pending = await asyncio.wait({second, third}, return_when=asyncio.FIRST_COMPLETED)
            assert len(done) == 1, "one waiter at a time"
            got2 = done.pop().result()
            await got2.release()
            got3 = await pending.pop()
            assert first.token < got2.token < got3.token
            await got3.release()

    asyncio.run(main())


async def wait_async(ask, ok, timeout=5.0):
    end = time.monotonic() + timeout
    while True:
        value = await ask()
        if ok(value):
            return value
        assert time.monotonic() < end, f"condition not met: last {value}"
        await asyncio.sleep(0.02)


def test_release_retried_across_a_cut_connection(node, proxies):
    proxy = proxies(node.addr)
    with baton.Client([proxy.addr]) as client:
        lock = client.acquire("r", 1, 60)
        proxy.cut(refuse=True)
        threading.Timer(1.0, lambda: setattr(proxy, "refusing", False)).start()
        start = time.monotonic()
        lock.release()  # retried until the background redial (3 s) is back
        assert time.monotonic() - start < 5
    with baton.Client([node.addr]) as direct:
        assert not direct.inspect("r").held


def test_release_gives_up_after_five_seconds(node, proxies):
    proxy = proxies(node.addr)
    with baton.Client([proxy.addr]) as client:
        lock = client.acquire("r", 1, 60)
        proxy.cut(refuse=True)
        start = time.monotonic()
        with pytest.raises(baton.NoServer):
            lock.release()
        assert 4.5 < time.monotonic() - start < 6.5


def test_abandoned_acquire_granted_later_is_released_at_once(node):
    async def main():
        async with baton.aio.Client([node.addr]) as holder, baton.aio.Client([node.addr]) as waiter:
            held = await holder.acquire("late", 5, 30)
            task = asyncio.ensure_future(waiter.acquire("late", 20, 30))
            await wait_async(lambda: holder.inspect("late"), lambda s: s.waiters == 1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await held.release()
            # Granted to the abandoned acquire, then released by its client.
            await wait_async(lambda: holder.inspect("late"), lambda s: not s.held and s.waiters == 0, 3)
            again = await holder.acquire("late", 1, 30)
            assert again.token > held.token + 1

    asyncio.run(main())


def test_acquire_fails_over_with_the_rest_of_its_wait(node, proxies):
    a, b = proxies(node.addr), proxies(node.addr)
    with baton.Client([node.addr]) as other, baton.Client([a.addr, b.addr]) as client:
        held = other.acquire("fo", 1, 30)
        result = {}

        def wait():
            start = time.monotonic()
            try:
                result["lock"] = client.acquire("fo", 6, 30)
            except baton.Error as err:
                result["err"] = err
            result["took"] = time.monotonic() - start

        t = threading.Thread(target=wait)
        t.start()
        wait_for(lambda: other.inspect("fo").waiters == 1, 5, "the acquire to queue")
        before = (a.bytes_up, b.bytes_up)
        a.cut(refuse=True)
        b.cut(refuse=True)
        a.refusing = b.refusing = False  # the redial in 3 s finds them back
        wait_for(lambda: other.inspect("fo").waiters == 1 and (a.accepted + b.accepted) >= 3, 6, "the re-sent acquire")
        held.release()
        t.join(10)
        assert "lock" in result, result
        assert result["took"] < 6.5
        assert (a.bytes_up, b.bytes_up) != before
