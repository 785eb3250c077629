"""Protocol 1.2 against real `batond` processes: semaphores, shared locks,
holder values, watches and elections on a single node and in a priority
cluster (a watch and a leader through a fail-over). They need a node that
speaks 1.2 (`S ... protocol=1.2`)."""

from __future__ import annotations

import asyncio

import pytest

import baton
import baton.aio
from conftest import in_thread, priority_pair, serving, status, wait_for


def test_the_node_speaks_1_2(node):
    with baton.Client(node.addr) as client:
        [reply] = client.status()
        assert reply.status is not None and reply.status.protocol == "1.2"


def test_a_semaphore(node):
    with baton.Client(node.addr) as client:
        first = client.acquire("sem", 1, 30, permits=2)
        second = client.acquire("sem", 1, 30, permits=2, value="b")
        assert first.token < second.token
        assert client.try_acquire("sem", 30, permits=2) is None
        with pytest.raises(baton.Rejected) as refused:
            client.acquire("sem", 1, 30, permits=3)
        assert refused.value.reason == "the key has 2 permits"
        with pytest.raises(baton.Rejected) as refused:
            client.acquire("sem", 1, 30, shared=True)
        assert refused.value.reason == "the key has 2 permits"
        state = client.inspect("sem")
        assert (state.permits, state.mode, state.holder_count) == (2, "exclusive", 2)
        assert [(h.token, h.value) for h in state.holders] == [(first.token, None), (second.token, "b")]
        assert state.token == second.token
        thread, out = in_thread(lambda: client.acquire("sem", 10, 30, permits=2))
        wait_for(lambda: client.inspect("sem").waiters == 1, 5, "the third to queue")
        first.release()
        thread.join(10)
        assert out["result"].token > second.token
        second.release()
        out["result"].release()
        assert not client.inspect("sem").held


def test_a_query_answer_lists_16_holders_with_long_values(node):
    with baton.Client(node.addr) as client:
        locks = [client.acquire("wide", 1, 30, permits=20, value=f"{i:03d}" + "v" * 125) for i in range(20)]
        state = client.inspect("wide")
        assert state.holder_count == 20 and len(state.holders) == 16 and state.token == locks[-1].token
        assert [h.token for h in state.holders] == [lock.token for lock in locks[:16]]
        assert state.holders[3].value == "003" + "v" * 125
        for lock in locks:
            lock.release()


def test_shared_locks_and_no_barging(node):
    with baton.Client(node.addr) as client:
        readers = [client.acquire("rw", 1, 30, shared=True) for _ in range(2)]
        state = client.inspect("rw")
        assert state.mode == "shared" and state.holder_count == 2
        writer, wrote = in_thread(lambda: client.acquire("rw", 10, 30))
        wait_for(lambda: client.inspect("rw").waiters == 1, 5, "the writer to queue")
        # A reader arriving while the writer waits queues behind it.
        late, read = in_thread(lambda: client.acquire("rw", 10, 30, shared=True))
        wait_for(lambda: client.inspect("rw").waiters == 2, 5, "the late reader to queue")
        for lock in readers:
            lock.release()
        writer.join(10)
        state = client.inspect("rw")
        assert (state.token, state.mode, state.holder_count) == (wrote["result"].token, "exclusive", 1)
        assert state.waiters == 1 and "result" not in read
        wrote["result"].release()
        late.join(10)
        assert read["result"].token > wrote["result"].token
        read["result"].release()


def test_values_and_the_state_tag(node):
    with baton.Client(node.addr) as client:
        lock = client.acquire("val", 1, 30, value="10.0.0.1:80")
        state = client.inspect("val")
        assert state.values == ("10.0.0.1:80",) and state.tag != str(lock.token)
        lock.set_value("a,b")
        assert client.inspect("val").values == ("a,b",)
        lock.set_value(None)
        state = client.inspect("val")
        assert state.values == (None,) and state.tag == str(lock.token)
        with pytest.raises(baton.LeaseLost):
            client.set_value("val", lock.token + 1000, "x")
        lock.release()
        assert client.inspect("val").tag == "-"


def test_a_watch_sees_each_change(node):
    async def main():
        async with baton.aio.Client([node.addr]) as client:
            watch = client.watch("wk", wait=0.5)
            assert not (await watch.__anext__()).held
            step = asyncio.ensure_future(watch.__anext__())
            await asyncio.sleep(1.5)  # waits that run out unchanged are not reported
            assert not step.done()
            lock = await client.acquire("wk", 1, 30)
            assert (await asyncio.wait_for(step, 5)).token == lock.token
            step = asyncio.ensure_future(watch.__anext__())
            await lock.set_value("x")
            assert (await asyncio.wait_for(step, 5)).values == ("x",)
            step = asyncio.ensure_future(watch.__anext__())
            await lock.release()
            assert not (await asyncio.wait_for(step, 5)).held

    asyncio.run(main())


def test_watches_past_the_connection_limit_are_refused(nodes):
    node = nodes.start(["--max-watches-per-connection", "1"])

    async def main():
        async with baton.aio.Client([node.addr]) as client:
            # Two connections to one address: one of them gets two watches
            # (of two keys: one of a key at a time on a connection). The
            # watches admitted wait on the free keys (re-sent as their
            # waits run out); the one past the limit is refused at once.
            steps = [
                asyncio.ensure_future(client.watch(f"lim{i}", seen="-", wait=5).__anext__())
                for i in range(3)
            ]
            done, pending = await asyncio.wait(
                steps, timeout=15, return_when=asyncio.FIRST_EXCEPTION
            )
            for step in pending:
                step.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            refused = [
                s.exception() for s in done if isinstance(s.exception(), baton.Rejected)
            ]
            assert len(pending) == 2, (done, pending)
            assert refused and refused[0].reason == "too many watches", done

    asyncio.run(main())


def test_an_election(node):
    with baton.Client(node.addr) as a, baton.Client(node.addr) as b:
        ea, eb = a.election("el", lease=5), b.election("el", lease=5)
        assert eb.leader() is None
        lock = ea.campaign("node-a")
        assert eb.leader() == baton.Leader("node-a", lock.token)
        observer = b.election("el").observe(wait=1)
        assert next(observer) == baton.Leader("node-a", lock.token)
        ea.proclaim("node-a2")
        assert next(observer) == baton.Leader("node-a2", lock.token)
        thread, out = in_thread(lambda: eb.campaign("node-b"))
        wait_for(lambda: a.inspect("el").waiters == 1, 5, "the second candidate to queue")
        ea.resign()
        thread.join(10)
        leader = next(observer)
        assert leader is not None and leader.value == "node-b" and leader.token > lock.token
        assert eb.lock is out["result"]
        eb.resign()
        assert next(observer) is None
        observer.close()


def test_priority_a_watch_and_a_leader_ride_a_fail_over(nodes):
    cluster, active, standby = priority_pair(nodes)
    addrs = [n.addr for n in cluster]

    async def main():
        # Given the standby only: every request is redirected to the active.
        async with baton.aio.Client([standby]) as client, baton.aio.Client(addrs) as other:
            election = client.election("p/leader", lease=5)
            lock = await election.campaign("one")
            watch = other.watch("p/leader", wait=2)
            assert (await watch.__anext__()).values == ("one",)
            step = asyncio.ensure_future(watch.__anext__())
            await asyncio.to_thread(
                wait_for,
                lambda: int((status(standby) or {"token": "0"})["token"]) >= lock.token,
                10,
                "the grant replicated",
            )
            next(n for n in cluster if n.addr == active).kill()
            await asyncio.to_thread(wait_for, lambda: serving([standby]), 20, "the standby promoted")
            assert await other.election("p/leader").leader() == baton.Leader("one", lock.token)
            await election.proclaim("two")  # through the new active
            state = await asyncio.wait_for(step, 30)
            assert state.values == ("two",) and state.token == lock.token
            assert not lock.is_lost
            await election.resign()

    asyncio.run(main())


def test_priority_a_semaphore_and_shared_grants_through_a_standby(nodes):
    cluster, active, standby = priority_pair(nodes)
    addrs = [n.addr for n in cluster]
    with baton.Client([standby]) as client:
        permits = [client.acquire("p/sem", 1, 30, permits=3, value=f"w{i}") for i in range(3)]
        assert client.try_acquire("p/sem", 30, permits=3) is None
        assert client.inspect("p/sem").values == ("w0", "w1", "w2")
        readers = [client.acquire("p/rw", 1, 30, shared=True) for _ in range(2)]
        assert client.try_acquire("p/rw", 30) is None
        for lock in permits + readers:
            lock.release()
        assert not client.inspect("p/sem").held and not client.inspect("p/rw").held


def test_a_watch_and_an_observer_on_a_node_with_a_short_max_wait(nodes):
    node = nodes.start(["--max-wait", "2"])
    with baton.Client(node.addr) as client:
        watch = client.watch("short")
        observe = client.election("short").observe()
        assert not next(watch).held and next(observe) is None
        lock = client.election("short", lease=10).campaign("node-a")
        assert next(watch).token == lock.token
        assert next(observe) == baton.Leader("node-a", lock.token)
        # The node's maximum runs out under the next steps: they are sent
        # again, and see the next change.
        thread, out = in_thread(lambda: (next(watch), next(observe)))
        with pytest.raises(baton.TimedOut):
            client.acquire("short", 0, 10)  # the node's 2 s
        lock.set_value("node-a2")
        thread.join(10)
        state, leader = out["result"]
        assert state.values == ("node-a2",) and leader == baton.Leader("node-a2", lock.token)
        watch.close()
        observe.close()


def test_two_readers_and_a_writer_of_one_key_from_one_client_keep_their_own_answers(node):
    async def main():
        async with baton.aio.Client([node.addr]) as holder, baton.aio.Client([node.addr]) as client:
            lock = await holder.acquire("swap", 1, 30)
            # One reader on each of the client's two connections, then a
            # writer with a shorter wait: with an acquire of the key in
            # flight on both, it waits in the client and times out there.
            readers = [asyncio.ensure_future(client.acquire("swap", 20, 30, shared=True)) for _ in range(2)]
            writer = asyncio.ensure_future(client.acquire("swap", 1, 30))
            await until_waiters(holder, "swap", 2)
            first, _ = await asyncio.wait([writer, *readers], timeout=10, return_when=asyncio.FIRST_COMPLETED)
            await lock.release()
            outcomes = await asyncio.wait_for(asyncio.gather(writer, *readers, return_exceptions=True), 10)
            assert first == {writer} and isinstance(outcomes[0], baton.TimedOut), outcomes
            assert all(isinstance(r, baton.aio.Lock) and r.shared for r in outcomes[1:]), outcomes

    asyncio.run(main())


async def until_waiters(client, key, n):
    """Polls until `key` has `n` waiters, as the node reports."""
    for _ in range(500):
        if (await client.inspect(key)).waiters == n:
            return
        await asyncio.sleep(0.02)
    pytest.fail(f"{key} never had {n} waiters")
