"""At most one acquire and one watch of a key in flight on one connection
(docs/clients.md): a node answers a later acquire's `T` or `E`, or a later
watch, before an older request of the same key that still waits, and
matching by (op, key) would hand that answer to the older caller. Against
the fake 1.2 node (fake12.py), which answers in that overtaking order and
records every request sent while one of its op and key was pending on the
same connection."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Dict

import pytest

import baton
from fake12 import Waiter, fake_cluster  # noqa: F401 (a fixture)
from scripted import poll


def _held_elsewhere(fake: Any, key: str) -> int:
    """Grants `key` to someone else (on no connection); its token."""
    grant = fake.run(lambda: fake._grant(key, fake._key(key), Waiter(None, False, None, "60")))
    return int(grant.split(" ")[2])


def _release(fake: Any, key: str, token: int) -> None:
    """That holder releases: the waiters are served."""
    assert fake.run(lambda: fake._op_R(None, key, [str(token)])) == f"R {key}"


async def _readers_then_writer(client: baton.aio.Client) -> Dict[str, Any]:
    r1 = asyncio.ensure_future(client.acquire("rw", 20, 30, shared=True))
    r2 = asyncio.ensure_future(client.acquire("rw", 20, 30, shared=True))
    writer = asyncio.ensure_future(client.acquire("rw", 1, 30))
    # The writer's short wait runs out while the readers wait.
    with pytest.raises(baton.TimedOut):
        await asyncio.wait_for(writer, 10)
    await asyncio.sleep(0.2)
    return {"r1": r1, "r2": r2}


def test_acquires_of_one_key_on_one_connection_keep_their_own_answers(fake_cluster):
    fake = fake_cluster(1)
    holder = _held_elsewhere(fake, "rw")

    async def main() -> None:
        async with baton.aio.Client(fake.addrs()) as client:
            readers = await _readers_then_writer(client)
            assert not any(r.done() for r in readers.values()), "the readers still wait"
            _release(fake, "rw", holder)
            locks = await asyncio.wait_for(asyncio.gather(*readers.values()), 10)
            assert all(lock.shared for lock in locks)
            assert len({lock.token for lock in locks}) == 2
            inspected = await client.inspect("rw")
            assert inspected.mode == "shared" and inspected.holder_count == 2

    asyncio.run(main())
    assert fake.overlaps == []


def test_blocking_acquires_of_one_key_on_one_connection_keep_their_own_answers(fake_cluster):
    fake = fake_cluster(1)
    holder = _held_elsewhere(fake, "rw")
    results: Dict[str, Any] = {}

    def acquire(name: str, wait: float, shared: bool) -> None:
        try:
            results[name] = client.acquire("rw", wait, 30, shared=shared)
        except baton.Error as err:
            results[name] = err

    with baton.Client(fake.addrs()) as client:
        threads = []
        for name, wait, shared in (("r1", 20, True), ("r2", 20, True), ("w", 1, False)):
            sent = len(fake.nodes[0].received("A"))
            thread = threading.Thread(target=acquire, args=(name, wait, shared))
            thread.start()
            threads.append(thread)
            if name != "w":  # sent in this order
                poll(lambda: len(fake.nodes[0].received("A")) > sent, 5, f"{name} sent")
        threads[2].join(10)
        assert isinstance(results["w"], baton.TimedOut), results
        time.sleep(0.2)
        assert "r1" not in results and "r2" not in results, results
        _release(fake, "rw", holder)
        for thread in threads:
            thread.join(10)
        assert all(results[r].shared for r in ("r1", "r2")), results
    assert fake.overlaps == []


def test_a_refusal_of_a_later_acquire_goes_to_its_own_caller(fake_cluster):
    fake = fake_cluster(1)
    holder = _held_elsewhere(fake, "sem")

    async def main() -> None:
        async with baton.aio.Client(fake.addrs()) as client:
            waiting = [asyncio.ensure_future(client.acquire("sem", 20, 30)) for _ in range(2)]
            # Refused by the node at once (the key has 1 permit), but it
            # waits in the client until an acquire of the key ahead of it
            # on its connection is answered.
            odd = asyncio.ensure_future(client.acquire("sem", 20, 30, permits=3))
            await asyncio.sleep(0.3)
            assert not odd.done() and not any(w.done() for w in waiting)
            _release(fake, "sem", holder)
            first = await asyncio.wait_for(waiting[0], 10)
            with pytest.raises(baton.Rejected):
                await asyncio.wait_for(odd, 10)
            await first.release()
            second = await asyncio.wait_for(waiting[1], 10)
            assert second.token > first.token
            await second.release()

    asyncio.run(main())
    assert fake.overlaps == []


def test_an_acquire_waiting_its_turn_times_out_unsent_and_a_cancelled_one_leaves(fake_cluster):
    fake = fake_cluster(1)
    holder = _held_elsewhere(fake, "q")

    async def main() -> None:
        async with baton.aio.Client(fake.addrs()) as client:
            # One in flight on each of the two connections.
            ahead = [asyncio.ensure_future(client.acquire("q", 20, 30)) for _ in range(2)]
            cancelled = asyncio.ensure_future(client.acquire("q", 20, 30))
            short = asyncio.ensure_future(client.acquire("q", 0.5, 30))
            behind = asyncio.ensure_future(client.acquire("q", 20, 30))
            await asyncio.sleep(0.1)
            cancelled.cancel()
            start = time.monotonic()
            with pytest.raises(baton.TimedOut):
                await short
            assert time.monotonic() - start < 2
            assert len(fake.nodes[0].received("A")) == 2, "only the two ahead were sent"
            _release(fake, "q", holder)
            lock = await asyncio.wait_for(ahead[0], 10)
            await lock.release()
            lock = await asyncio.wait_for(ahead[1], 10)
            # Its turn came once the first was answered; sent with what was
            # left of its wait.
            sent = fake.nodes[0].received("A")[2]
            assert sent.startswith("A q ") and float(sent.split(" ")[2]) < 20
            await lock.release()
            await (await asyncio.wait_for(behind, 10)).release()

    asyncio.run(main())
    assert fake.overlaps == []
    assert len(fake.nodes[0].received("A")) == 3


def test_a_later_watch_of_a_key_waits_for_the_one_in_flight(fake_cluster):
    fake = fake_cluster(1)
    node = fake.nodes[0]

    async def main() -> None:
        async with baton.aio.Client(fake.addrs()) as client:
            lock = await client.acquire("w", 1, 30)
            waiting = [client.watch("w", seen=str(lock.token)) for _ in range(2)]
            steps = [asyncio.ensure_future(w.__anext__()) for w in waiting]
            poll_until = time.monotonic() + 5
            while len(node.received("W")) < 2 and time.monotonic() < poll_until:
                await asyncio.sleep(0.01)
            # Answered at once by the node, but sent only once an older
            # watch of the key on its connection is answered.
            stale = asyncio.ensure_future(client.watch("w", seen="999").__anext__())
            await asyncio.sleep(0.3)
            assert not stale.done() and len(node.received("W")) == 2
            await lock.release()
            states = await asyncio.wait_for(asyncio.gather(*steps, stale), 10)
            assert all(not s.held for s in states)

    asyncio.run(main())
    assert fake.overlaps == []
