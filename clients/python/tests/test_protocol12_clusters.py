"""Protocol 1.2 through the Python client in a 3-node Raft cluster and a
priority cluster: semaphores, shared locks and values committed through
the log, and a watch and an election through a kill -9 of the serving node
while a candidate waits: the client redials, the observers see the next
leader, and tokens keep rising. Blocking and asyncio clients both."""

from __future__ import annotations

import asyncio
from typing import List, Optional

import pytest

import baton
import baton.aio
from conftest import Batond, agreed_leader, in_thread, priority_pair, raft_trio, serving, status, wait_for


def _kill(cluster: List[Batond], addr: str) -> None:
    next(n for n in cluster if n.addr == addr).kill()


def _replicated(addrs: List[str], token: int) -> bool:
    return all(int((status(a) or {"token": "0"})["token"]) >= token for a in addrs)


async def until_waiters(client: baton.aio.Client, key: str, n: int) -> None:
    """Polls until `key` has `n` waiters, as the serving node reports."""
    for _ in range(1000):
        if (await client.inspect(key)).waiters == n:
            return
        await asyncio.sleep(0.02)
    pytest.fail(f"{key} never had {n} waiters")


def test_raft_a_semaphore_shared_locks_and_values(nodes):
    cluster, leader = raft_trio(nodes)
    # A follower first: every request is redirected to the leader.
    addrs = sorted((n.addr for n in cluster), key=lambda a: a == leader)
    with baton.Client(addrs) as client:
        first = client.acquire("sem", 5, 60, permits=2, value="a")
        second = client.acquire("sem", 5, 60, permits=2)
        assert second.token > first.token
        assert client.try_acquire("sem", 60, permits=2) is None
        with pytest.raises(baton.Rejected) as refused:
            client.acquire("sem", 5, 60, permits=3)
        assert refused.value.reason == "the key has 2 permits"
        second.set_value("b")
        state = client.inspect("sem")
        assert (state.permits, state.values, state.token) == (2, ("a", "b"), second.token)
        third, got = in_thread(lambda: client.acquire("sem", 20, 60, permits=2))
        wait_for(lambda: client.inspect("sem").waiters == 1, 20, "the third to queue")
        first.release()
        third.join(20)
        assert got["result"].token > second.token

        # A reader holds; a writer waits; a reader behind the writer waits too.
        reader = client.acquire("rw", 5, 60, shared=True)
        writer, wrote = in_thread(lambda: client.acquire("rw", 20, 60))
        wait_for(lambda: client.inspect("rw").waiters == 1, 20, "the writer to queue")
        # Redirects bring every request to the leader's one connection,
        # where the writer's acquire of the key is in flight: the late
        # reader waits in the client until the writer is answered, then
        # queues behind it.
        late, read = in_thread(lambda: client.acquire("rw", 20, 60, shared=True))
        reader.release()
        writer.join(20)
        wait_for(lambda: client.inspect("rw").waiters == 1, 20, "the late reader to queue")
        state = client.inspect("rw")
        assert (state.token, state.mode, state.waiters) == (wrote["result"].token, "exclusive", 1)
        wrote["result"].release()
        late.join(20)
        assert read["result"].token > wrote["result"].token
        assert client.inspect("rw").mode == "shared"
        second.set_value(None)
        assert client.inspect("sem").values == (None, None)


def test_raft_a_watch_and_an_election_ride_a_leader_kill(nodes):
    cluster, leader = raft_trio(nodes)
    addrs = [n.addr for n in cluster]
    others = [a for a in addrs if a != leader]

    async def main() -> None:
        async with baton.aio.Client(addrs) as first, baton.aio.Client(addrs) as second, \
                baton.aio.Client(addrs) as watcher:
            election = first.election("r/leader", lease=15)
            lock = await election.campaign("node-a")
            rival = asyncio.ensure_future(second.election("r/leader", lease=15).campaign("node-b"))
            await until_waiters(first, "r/leader", 1)
            observe = watcher.election("r/leader").observe(wait=5)
            assert await observe.__anext__() == baton.Leader("node-a", lock.token)
            permit = await first.acquire("r/pool", 5, 60, permits=2, value="p")
            watch = watcher.watch("r/pool", wait=5)
            assert (await watch.__anext__()).values == ("p",)
            observing = asyncio.ensure_future(observe.__anext__())
            watching = asyncio.ensure_future(watch.__anext__())

            await asyncio.to_thread(wait_for, lambda: _replicated(others, permit.token), 10, "the grants replicated")
            _kill(cluster, leader)
            await asyncio.to_thread(wait_for, lambda: agreed_leader(others), 20, "a new Raft leader")
            # The grants were committed: the same leader, kept alive through
            # the new Raft leader; the pending steps wait there.
            assert await election.leader() == baton.Leader("node-a", lock.token)
            assert not observing.done() and not watching.done()
            await election.proclaim("node-a2")
            assert await asyncio.wait_for(observing, 30) == baton.Leader("node-a2", lock.token)
            await permit.set_value("q")
            assert (await asyncio.wait_for(watching, 30)).values == ("q",)
            assert not lock.is_lost

            # The waiting candidate's acquire, lost with the old leader, was
            # sent again; it leads after the resignation, with a later token.
            await until_waiters(first, "r/leader", 1)
            await election.resign()
            successor = await asyncio.wait_for(rival, 30)
            assert successor.token > lock.token and successor.token > permit.token
            seen = await asyncio.wait_for(observe.__anext__(), 30)
            if seen is None:  # a hand-over may show the office vacant between
                seen = await asyncio.wait_for(observe.__anext__(), 30)
            assert seen == baton.Leader("node-b", successor.token)
            await successor.release()
            assert await asyncio.wait_for(observe.__anext__(), 30) is None
            await permit.release()

    asyncio.run(main())


def test_priority_a_waiting_candidate_and_an_observer_ride_a_fail_over(nodes):
    cluster, active, standby = priority_pair(nodes)
    addrs = [n.addr for n in cluster]
    with baton.Client(addrs) as first, baton.Client(addrs) as second:
        election = first.election("p/leader", lease=15)
        lock = election.campaign("node-a")
        rival = second.election("p/leader", lease=15)
        candidate, led = in_thread(lambda: rival.campaign("node-b"))
        wait_for(lambda: first.inspect("p/leader").waiters == 1, 10, "the candidate to queue")
        observe = second.election("p/leader").observe(wait=5)
        assert next(observe) == baton.Leader("node-a", lock.token)
        observer, observed = in_thread(lambda: next(observe))
        wait_for(lambda: _replicated([standby], lock.token), 10, "the grant replicated")

        _kill(cluster, active)
        wait_for(lambda: serving([standby]), 20, "the standby promoted")
        assert election.leader() == baton.Leader("node-a", lock.token)
        wait_for(lambda: first.inspect("p/leader").waiters == 1, 20, "the candidate to queue again")
        assert observer.is_alive(), observed
        election.resign()
        candidate.join(30)
        successor = led["result"]
        assert successor.token > lock.token
        observer.join(30)
        seen: Optional[baton.Leader] = observed["result"]
        if seen is None:  # a hand-over may show the office vacant between
            seen = next(observe)
        assert seen == baton.Leader("node-b", successor.token)
        assert rival.lock is successor
        rival.resign()
        assert next(observe) is None
        observe.close()
