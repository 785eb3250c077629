"""FIFO across clients; many threads and tasks on few keys, never two
holders of one key at once (checked with the fencing tokens)."""

from __future__ import annotations

import asyncio
import random
import threading
import time

import baton
from baton.fence import Fence
from conftest import wait_for


def test_fifo_across_clients(node):
    clients = [baton.Client([node.addr]) for _ in range(4)]
    try:
        held = clients[0].acquire("fifo", 1, 30)
        order, results = [], {}

        def wait(i):
            lock = clients[i].acquire("fifo", 10, 30)
            order.append(i)
            results[i] = lock
            lock.release()

        threads = []
        for i in (1, 2, 3):
            t = threading.Thread(target=wait, args=(i,))
            t.start()
            threads.append(t)
            wait_for(lambda: clients[0].inspect("fifo").waiters == i, 5, f"waiter {i} queued")
        held.release()
        for t in threads:
            t.join(10)
        assert order == [1, 2, 3]
        assert held.token < results[1].token < results[2].token < results[3].token
    finally:
        for c in clients:
            c.close()


class Resource:
    """A protected resource: fenced, and it notices overlapping holders."""

    def __init__(self) -> None:
        self.fence = Fence(reentrant=False)
        self.inside = 0
        self.mutex = threading.Lock()
        self.writes = 0

    def enter(self, token: int) -> None:
        self.fence.admit(token)
        with self.mutex:
            self.inside += 1
            assert self.inside == 1, "two holders at once"

    def leave(self) -> None:
        with self.mutex:
            self.inside -= 1
            self.writes += 1


def test_many_threads_on_few_keys_never_overlap(node):
    keys = ["few/0", "few/1", "few/2"]
    resources = {k: Resource() for k in keys}
    errors = []
    end = time.monotonic() + 3
    with baton.Client([node.addr]) as a, baton.Client([node.addr]) as b:

        def work(client):
            try:
                while time.monotonic() < end:
                    key = random.choice(keys)
                    with client.lock(key, wait=5, lease=10) as lock:
                        resources[key].enter(lock.token)
                        time.sleep(0.001)
                        resources[key].leave()
            except Exception as err:  # reported below
                errors.append(err)

        threads = [threading.Thread(target=work, args=(a if i % 2 else b,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(15)
    assert not errors, errors
    assert sum(r.writes for r in resources.values()) > 100


def test_many_tasks_on_few_keys_never_overlap(node):
    keys = ["task/0", "task/1"]
    resources = {k: Resource() for k in keys}

    async def main():
        async with baton.aio.Client([node.addr]) as client:
            end = time.monotonic() + 2

            async def work(i):
                while time.monotonic() < end:
                    key = keys[i % 2] if random.random() < 0.5 else random.choice(keys)
                    async with client.lock(key, wait=5, lease=10) as lock:
                        resources[key].enter(lock.token)
                        await asyncio.sleep(0)
                        resources[key].leave()

            await asyncio.wait_for(asyncio.gather(*(work(i) for i in range(64))), 15)

    asyncio.run(main())
    assert sum(r.writes for r in resources.values()) > 100
