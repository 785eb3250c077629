"""Keep-alive: renewed every third of the lease; `lost` and `on_lost` when
it cannot renew, before the lease ends on the node."""

from __future__ import annotations

import asyncio
import threading
import time

import baton
from conftest import wait_for


def test_keep_alive_outlives_the_lease(node):
    with baton.Client([node.addr]) as client:
        with client.lock("ka", wait=1, lease=0.6) as lock:
            time.sleep(1.5)  # the work, longer than the lease
            assert client.inspect("ka").token == lock.token
            assert not lock.lost.is_set()


def test_lost_fires_before_the_lease_ends(node, proxies):
    proxy = proxies(node.addr)
    called = threading.Event()
    with baton.Client([proxy.addr]) as client, baton.Client([node.addr]) as observer:
        lock = client.acquire("ka/lost", 1, 1.5, keep_alive=True, on_lost=lambda l: called.set())
        proxy.cut(refuse=True)
        assert lock.lost.wait(5)
        lost_at = time.monotonic()
        assert lost_at < lock.expires_at
        state = observer.inspect("ka/lost")
        assert state.held and state.token == lock.token, "lost is told while the grant still lasts"
        assert called.wait(2)
        proxy.refusing = False  # so that close can release it
        wait_for(lambda: proxy.accepted >= 3, 8, "reconnect")


def test_async_lost_event_and_callback(node, proxies):
    proxy = proxies(node.addr)

    async def main():
        seen = asyncio.Event()

        async def on_lost(lock):
            seen.set()

        async with baton.aio.Client([proxy.addr]) as client:
            async with client.lock("ka/aio", wait=1, lease=1.2, on_lost=on_lost) as lock:
                proxy.cut(refuse=True)
                await asyncio.wait_for(lock.lost.wait(), 5)
                assert time.monotonic() < lock.expires_at
                await asyncio.wait_for(seen.wait(), 2)
                proxy.refusing = False
                end = time.monotonic() + 8
                while proxy.accepted < 4:  # reconnected: exit can release
                    assert time.monotonic() < end, "no reconnect"
                    await asyncio.sleep(0.02)

    try:
        asyncio.run(main())
    except baton.LeaseLost:
        pass  # leaving the block after the lease ran out reports it
