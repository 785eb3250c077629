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
from conftest import serving, settled, status, wait_for

#: The wait of the acquire sent right after the stop.
WAIT = 5
#: The keep-alive lock's lease: renewed every third, on the new node.
LEASE = 10
#: A short keep-alive lease: a renewal stuck on the frozen node has
#: 0.9 - 1/3 of it (3.4 s) before the lock is marked lost, less than the 4 s
#: it takes to notice the stop, so it must be retried elsewhere at once
#: (docs/clients.md, "Keep-alive"). Elsewhere is a node that serves only
#: once it has taken over: after the 1 s of silence that sends the renewal
#: elsewhere, 2.4 s for a standby's promotion or a Raft election (0.3-0.6 s
#: of silence, a vote, the new leader's first entry) on a loaded machine.
#: A 3 s lease left 0.7 s for that: an election under load took longer.
SHORT_LEASE = 6


@pytest.fixture
def freeze():
    stopped = []

    def stop(node):
        os.kill(node.proc.pid, signal.SIGSTOP)
        stopped.append(node)
        wait_for(lambda: _all_threads_stopped(node.proc.pid), 10, "the node's threads to stop")
        return time.monotonic()

    yield stop
    for node in stopped:  # let it run again, then the nodes fixture kills it
        if node.proc.poll() is None:
            os.kill(node.proc.pid, signal.SIGCONT)


def _all_threads_stopped(pid):
    """Whether every thread of process `pid` is stopped. A SIGSTOP stops
    them only once one of them, scheduled, takes the signal: on a loaded
    machine the node may go on serving for a while after `kill` returns
    (grant a lock, or replicate the grant and freeze before answering)."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
        states = []
        for tid in threads:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                states.append(f.read().rsplit(")", 1)[1].split()[0])
    except OSError:  # a thread that ended meanwhile
        return False
    return all(state in ("T", "t") for state in states)


def _frozen_cluster(nodes, mode):
    cluster = nodes.cluster(3 if mode == "raft" else 2, mode)
    addrs = [n.addr for n in cluster]
    # Every other node follows it: the node frozen next is the one serving.
    leader = wait_for(lambda: settled(addrs, mode), 20, "a serving node the others follow")
    others = [a for a in addrs if a != leader]
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
        wait_for(lambda: serving(others), 10, "a node serving in the frozen one's place")
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
    wait_for(lambda: serving(others), 10, "a node serving in the frozen one's place")
