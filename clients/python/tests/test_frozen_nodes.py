"""A serving node stopped with SIGSTOP (a frozen process: a long pause, a
stuck disk), in a priority cluster and in a Raft cluster: the client
notices it by its silence and goes on with the node that serves next."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

import baton
from conftest import serving, status, wait_for

#: The wait of the acquire sent right after the stop (issue 27's figure).
WAIT = 5
#: The keep-alive lock's lease: renewed every third, on the new node.
LEASE = 10
#: A short keep-alive lease, shorter than the time to notice the stop.
SHORT_LEASE = 3


@pytest.fixture
def freeze():
    stopped = []

    def stop(node):
        os.kill(node.proc.pid, signal.SIGSTOP)
        stopped.append(node)
        return time.monotonic()

    yield stop
    for node in stopped:  # let it run again, then the nodes fixture kills it
        if node.proc.poll() is None:
            os.kill(node.proc.pid, signal.SIGCONT)


def _frozen_cluster(nodes, mode):
    cluster = nodes.cluster(3 if mode == "raft" else 2, mode)
    addrs = [n.addr for n in cluster]
    leader = wait_for(lambda: serving(addrs), 20, "a serving node")
    others = [a for a in addrs if a != leader]

    def settled():
        states = [status(a) or {} for a in others]
        return all(st.get("role") in ("standby", "follower") and st.get("active") == leader
                   for st in states)

    # Every other node follows it: the node frozen next is the one serving.
    wait_for(settled, 20, "the other nodes following the serving node")
    node = next(n for n in cluster if n.addr == leader)
    return addrs, node, others


def _replicated(others, token):
    wait_for(lambda: all(int((status(a) or {"token": "0"})["token"]) >= token for a in others),
             10, "the grant replicated")


@pytest.mark.parametrize("mode", ["priority", "raft"])
def test_acquire_and_keep_alive_ride_out_a_frozen_serving_node(nodes, freeze, mode):
    addrs, leader, others = _frozen_cluster(nodes, mode)
    with baton.Client(addrs) as client:
        held = client.acquire("frozen/held", WAIT, LEASE, keep_alive=True)
        # Renewed every second: its renewals cannot wait for the stop to be noticed.
        short = client.acquire("frozen/short", WAIT, SHORT_LEASE, keep_alive=True)
        _replicated(others, short.token)
        stopped = freeze(leader)
        lock = client.acquire("frozen/free", WAIT, 30)
        took = time.monotonic() - stopped
        print(f"\n{mode}, blocking client: SIGSTOP -> acquire granted in {took:.2f} s")
        assert serving(others) is not None
        assert client.inspect("frozen/free").token == lock.token

        def renewed_since_the_stop():
            state = client.inspect("frozen/held")
            assert state.token == held.token, f"the keep-alive lock was lost: {state}"
            # Without a renewal after the stop, at most LEASE - elapsed is left.
            return state.lease_left > LEASE - (time.monotonic() - stopped) + 0.5

        wait_for(renewed_since_the_stop, LEASE, "a renewal on the new serving node")
        assert not held.lost.is_set() and not short.lost.is_set()
        assert client.inspect("frozen/short").token == short.token
        lock.release()
        held.release()
        short.release()


@pytest.mark.parametrize("mode", ["priority", "raft"])
def test_async_acquire_rides_out_a_frozen_serving_node(nodes, freeze, mode):
    addrs, leader, others = _frozen_cluster(nodes, mode)

    async def main():
        async with baton.aio.Client(addrs) as client:
            # Every connection in use before the stop.
            await asyncio.gather(*(client.inspect(f"warm/{i}") for i in range(len(addrs))))
            stopped = freeze(leader)
            lock = await client.acquire("frozen/free", WAIT, 30)
            took = time.monotonic() - stopped
            print(f"\n{mode}, asyncio client: SIGSTOP -> acquire granted in {took:.2f} s")
            assert (await client.inspect("frozen/free")).token == lock.token
            await lock.release()

    asyncio.run(main())
    assert serving(others) is not None
