"""A node killed under a held lock, in a priority cluster and in a Raft
cluster; `M` redirects followed."""

from __future__ import annotations

import pytest

import baton
from conftest import priority_pair, serving, status, wait_for


@pytest.mark.parametrize("mode", ["priority", "raft"])
def test_node_killed_under_a_held_lock(nodes, mode):
    cluster = nodes.cluster(3 if mode == "raft" else 2, mode)
    addrs = [n.addr for n in cluster]
    leader = wait_for(lambda: serving(addrs), 20, "an active node")
    with baton.Client(addrs) as client:
        lock = client.acquire("jobs/nightly", 5, 30)
        lock.keep_alive()
        others = [a for a in addrs if a != leader]
        wait_for(lambda: all(int((status(a) or {"token": "0"})["token"]) >= lock.token for a in others),
                 10, "the grant replicated")
        next(n for n in cluster if n.addr == leader).kill()
        wait_for(lambda: serving(others), 20, "a new active node")
        # The lock survived the failover: still held with its token, and
        # released through the new active node.
        assert client.inspect("jobs/nightly").token == lock.token
        assert client.try_acquire("jobs/nightly", lease=5) is None
        lock.renew(lease=30)
        lock.release()
        after = client.acquire("jobs/nightly", 5, 30)
        assert after.token > lock.token
        assert not lock.lost.is_set()
        after.release()


def test_redirect_from_a_standby_is_followed(nodes):
    _, active, standby = priority_pair(nodes)
    with baton.Client([standby]) as client:
        lock = client.acquire("r/1", 5, 30)
        assert client.inspect("r/1").token == lock.token
        lock.release()
        by_addr = {st.addr: st.status for st in client.status()}
        assert by_addr[standby].role == "standby" and by_addr[standby].active == active
        assert by_addr[active].role == "active"  # the redirect's connection
