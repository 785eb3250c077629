"""Protocol 1.2 against a fake cluster speaking its lines (fake12.py):
acquire options, holder values and `V`, the extended `Q`, watches (their
re-sending, several of one key, redirects, fail-over, reconnects, a cancel
that leaves nothing behind), elections, and every new error line."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import baton
from baton import _proto
from fake12 import fake_cluster  # noqa: F401 (a fixture)
from scripted import fakes, poll  # noqa: F401 (fakes is a fixture)


def test_acquire_options_on_the_wire(fake_cluster):
    fake = fake_cluster(1)
    node = fake.nodes[0]
    with baton.Client(node.addr) as client:
        plain = client.acquire("plain", 1, 30)
        pool = [client.acquire("pool", 1, 30, permits=3, value=f"w{i}") for i in range(3)]
        reader = client.acquire("doc", 1, 30, shared=True)
        assert node.received("A") == [
            "A plain 1 30",
            "A pool 1 30 permits=3 value=w0",
            "A pool 1 30 permits=3 value=w1",
            "A pool 1 30 permits=3 value=w2",
            "A doc 1 30 mode=shared",
        ]
        assert len({plain.token, reader.token, *(lock.token for lock in pool)}) == 5
        assert [lock.permits for lock in pool] == [3, 3, 3] and pool[1].value == "w1"
        assert reader.shared and not plain.shared and plain.permits == 1 and plain.value is None
        assert client.try_acquire("pool", 30, permits=3) is None, "every permit is taken"
        with pytest.raises(baton.Rejected) as refused:
            client.acquire("pool", 1, 30, permits=4)
        assert refused.value.reason == "the key has 3 permits"
        with pytest.raises(baton.Rejected) as refused:
            client.acquire("pool", 1, 30, shared=True)
        assert refused.value.reason == "the key has 3 permits"
        with client.lock("doc", wait=1, lease=30, shared=True) as second:
            assert second.shared and client.inspect("doc").holder_count == 2


def test_each_permit_and_shared_grant_is_renewed_and_released_on_its_own(fake_cluster):
    node = fake_cluster(1).nodes[0]
    with baton.Client(node.addr) as client:
        with client.lock("ka", 1, 0.3, permits=2) as a, client.lock("ka", 1, 0.3, permits=2) as b:
            with client.lock("kr", 1, 0.3, shared=True) as r:
                poll(
                    lambda: all(any(line.split(" ")[2] == str(lock.token) for line in node.received("K"))
                                for lock in (a, b, r)),
                    5, "a renewal of each grant",
                )
        released = node.received("R")
        assert sorted(released) == sorted(f"R {lock.key} {lock.token}" for lock in (a, b, r))


def test_bad_options_and_values_raise_and_send_nothing(fake_cluster):
    node = fake_cluster(1).nodes[0]
    with baton.Client(node.addr) as client:
        lock = client.acquire("k", 1, 30)
        before = len(node.lines)
        for permits in (0, 10_001, True, 2.0, "2"):
            with pytest.raises(baton.InvalidArgument):
                client.acquire("k", 1, 30, permits=permits)
        with pytest.raises(baton.InvalidArgument):
            client.acquire("k", 1, 30, shared=True, permits=2)
        for value in ("", "-", "a b", "tab\t", "x" * 129, "del\x7f", 5, b"\x00"):
            with pytest.raises(baton.InvalidArgument):
                client.acquire("k", 1, 30, value=value)
            with pytest.raises(baton.InvalidArgument):
                lock.set_value(value)
            with pytest.raises(baton.InvalidArgument):
                client.lock("k", 1, 30, value=value)
            with pytest.raises(baton.InvalidArgument):
                client.election("e").campaign(value)
        with pytest.raises(baton.InvalidArgument):
            client.watch("k", seen="a b")
        with pytest.raises(baton.InvalidArgument):
            client.watch("bad key")
        assert len(node.lines) == before
        assert _proto.value_bytes("x" * 128) == b"x" * 128


def test_values_set_cleared_and_reported(fake_cluster):
    fake = fake_cluster(1)
    node = fake.nodes[0]
    with baton.Client(node.addr) as client:
        lock = client.acquire("svc", 1, 30, value="10.0.0.1:80")
        state = client.inspect("svc")
        assert state.holders == (baton.Holder(lock.token, 30.0, "10.0.0.1:80"),)
        assert state.permits == 1 and state.mode == "exclusive" and state.tag != str(lock.token)
        lock.set_value("a,b=c")  # commas: the value is the holder field's last part
        assert client.inspect("svc").values == ("a,b=c",) and lock.value == "a,b=c"
        lock.set_value(None)
        state = client.inspect("svc")
        assert state.values == (None,) and state.tag == str(lock.token), "a plain key again"
        client.set_value("svc", lock.token, b"caf\xc3\xa9\xff")
        value = client.inspect("svc").values[0]
        assert value is not None and value.encode("utf-8", "surrogateescape") == b"caf\xc3\xa9\xff"
        assert node.received("V") == [
            f"V svc {lock.token} a,b=c", f"V svc {lock.token} -", f"V svc {lock.token} caf\xe9\udcff"
        ]
        with pytest.raises(baton.LeaseLost):
            client.set_value("svc", lock.token + 1, "x")
        client.release("svc", lock.token)  # behind the Lock's back: `N V` is the verdict
        with pytest.raises(baton.LeaseLost):
            lock.set_value("late")
        assert lock.lost.is_set()


def test_the_extended_query_answer():
    line = (
        b"Q k token=1020 lease=9.5 waiters=2 permits=20 mode=exclusive holders=20 "
        + b" ".join(b"holder=%d,9.5,v%d" % (1001 + i, i) for i in range(16))
        + b" state=1020.20.00ff00ff00ff00ff"
    )
    state = _proto.parse_response(line).state
    assert state is not None
    assert state.holder_count == 20 and len(state.holders) == 16 and state.permits == 20
    assert state.token == 1020 and state.waiters == 2 and state.tag == "1020.20.00ff00ff00ff00ff"
    assert state.holders[0] == baton.Holder(1001, 9.5, "v0")
    shared = _proto.parse_response(
        b"W k token=8 lease=1 waiters=0 permits=1 mode=shared holders=2 holder=7,2,- holder=8,1,- state=8.2.0123456789abcdef"
    ).state
    assert shared is not None and shared.mode == "shared" and shared.values == (None, None)
    free = _proto.parse_response(b"W k token=- lease=- waiters=3 state=-").state
    assert free is not None and not free.held and free.tag == "-" and free.holders == ()
    plain = _proto.parse_response(b"Q k token=5 lease=1.25 waiters=0").state
    assert plain is not None and plain.tag == "5" and plain.holders == (baton.Holder(5, 1.25),)
    for bad in (
        b"W k token=5 lease=1 waiters=0",  # W without state
        b"Q k token=5 lease=1 waiters=0 permits=2 mode=exclusive holders=1 holder=5,1,-",  # no state
        b"Q k token=5 lease=1 waiters=0 permits=2 mode=exclusive holders=2 holder=5,1,- state=5.2.0",
        b"Q k token=5 lease=1 waiters=0 permits=2 mode=both holders=1 holder=5,1,- state=5.1.0",
        b"Q k token=5 lease=1 waiters=0 permits=0 mode=shared holders=1 holder=5,1,- state=5.1.0",
        b"Q k token=5 lease=1 waiters=0 mode=shared permits=1 holders=1 holder=5,1,- state=5.1.0",
        b"Q k token=5 lease=1 waiters=0 permits=2 mode=shared holders=1 holder=5,1 state=5.1.0",
        b"Q k token=- lease=- waiters=0 permits=2 mode=shared holders=1 holder=5,1,- state=5.1.0",
        b"W k token=5 lease=1 waiters=0 state=\xc3\xa9",
        b"N Q k",
    ):
        with pytest.raises(_proto.BadLine):
            _proto.parse_response(bad)


def test_an_answer_line_of_up_to_4096_bytes_is_read(fake_cluster):
    fake = fake_cluster(1)
    value = "v" * 128
    with baton.Client(fake.addrs()) as client:
        locks = [client.acquire("wide", 1, 30, permits=20, value=value) for _ in range(20)]
        state = client.inspect("wide")
        assert state.holder_count == 20 and len(state.holders) == 16
        assert all(v == value for v in state.values)
        assert len(fake.run(lambda: fake.state("wide"))) > 2048
        for lock in locks:
            lock.release()


def test_a_watch_gives_the_state_then_each_change(fake_cluster):
    fake = fake_cluster(1)
    node = fake.nodes[0]
    with baton.Client(node.addr) as client, baton.Client(node.addr) as other:
        with client.watch("w", wait=0.2) as watch:
            first = next(watch)
            assert not first.held and first.tag == "-"
            assert node.received("Q") == ["Q w"] and not node.received("W")
            result = {}

            def change():
                poll(lambda: len(node.received("W")) >= 2, 5, "the watch re-sent after its wait ran out")
                result["lock"] = other.acquire("w", 1, 30)

            threading.Thread(target=change).start()
            held = next(watch)
            poll(lambda: "lock" in result, 5, "the acquire to return")
            assert held.token == result["lock"].token and held.tag == str(held.token)
            assert node.received("W")[:2] == ["W w 0.2 -", "W w 0.2 -"], "re-sent with the tag seen"
            result["lock"].set_value("x")
            valued = next(watch)
            assert valued.values == ("x",) and valued.tag != held.tag
            result["lock"].release()
            assert not next(watch).held
            assert node.received("W")[-1] == f"W w 0.2 {valued.tag}"
        with pytest.raises(StopIteration):
            next(watch)
        # `seen`: the first state is the first that differs from it.
        lock = other.acquire("w", 1, 30)
        watch = client.watch("w", seen=str(lock.token), wait=0.2)
        threading.Timer(0.3, lock.release).start()
        assert not next(watch).held
        assert node.received("Q") == ["Q w"], "no Q when seen is given"


def test_several_watches_of_one_key_are_each_answered(fake_cluster):
    fake = fake_cluster(1)
    node = fake.nodes[0]

    async def main():
        async with baton.aio.Client([node.addr]) as client:
            lock = await client.acquire("many", 1, 30)
            watches = [client.watch("many", seen="-") for _ in range(2)]
            watches += [client.watch("many", seen=str(lock.token)) for _ in range(4)]
            steps = [asyncio.ensure_future(w.__anext__()) for w in watches]
            # Those that saw the key free are answered at once; the others wait.
            states = await asyncio.wait_for(asyncio.gather(*steps[:2]), 5)
            assert [s.token for s in states] == [lock.token] * 2
            await asyncio.sleep(0.2)
            assert not any(step.done() for step in steps[2:])
            await lock.release()
            states = await asyncio.wait_for(asyncio.gather(*steps[2:]), 5)
            assert all(not s.held for s in states)

    asyncio.run(main())


def test_a_watch_follows_redirects_and_a_fail_over(fake_cluster):
    fake = fake_cluster(3)
    first, second, third = fake.nodes

    async def main():
        # Only the standby is given: the watch follows its `M W`.
        async with baton.aio.Client([first.addr]) as holder, baton.aio.Client([second.addr]) as client:
            lock = await holder.acquire("f", 1, 30)
            watch = client.watch("f", seen=str(lock.token), wait=5)
            step = asyncio.ensure_future(watch.__anext__())
            while not first.received("W"):
                await asyncio.sleep(0.01)
            assert second.received("W") == [f"W f 5 {lock.token}"], "redirected"
            assert first.received("W") == [f"W f 5 {lock.token}"]
            # The active stops serving: `M W f -`, then the third node serves.
            fake.fail_over(None)
            await asyncio.sleep(0.3)
            assert not step.done()
            fake.fail_over(2)
            while not third.received("W"):
                await asyncio.sleep(0.01)
            assert third.received("W")[-1] == f"W f 5 {lock.token}", "re-sent with the tag seen"
            await lock.release()
            state = await asyncio.wait_for(step, 5)
            assert not state.held

    asyncio.run(main())


def test_a_watch_survives_a_cut_connection(fake_cluster):
    fake = fake_cluster(2)

    async def main():
        async with baton.aio.Client(fake.addrs()) as client, baton.aio.Client(fake.addrs()) as other:
            watch = client.watch("c", wait=10)
            assert not (await watch.__anext__()).held
            step = asyncio.ensure_future(watch.__anext__())
            while not any(n.received("W") for n in fake.nodes):
                await asyncio.sleep(0.01)
            cut = 0 if fake.nodes[0].received("W") else 1
            fake.run(lambda: setattr(fake, "active", cut))
            fake.cut(cut)  # the other node is not active: it redirects back
            lock = await other.acquire("c", 10, 30)  # a change while it was cut
            state = await asyncio.wait_for(step, 10)
            assert state.token == lock.token
            sent = [line for n in fake.nodes for line in n.received("W")]
            assert sent.count("W c 10 -") >= 2, sent

    asyncio.run(main())


def test_a_watch_on_a_node_that_freezes_goes_elsewhere(fake_cluster):
    fake = fake_cluster(2)
    frozen, alive = fake.nodes

    async def main():
        async with baton.aio.Client(fake.addrs(), unresponsive_timeout=1.0) as client:
            lock = await client.acquire("fr", 1, 30)
            watch = client.watch("fr", seen=str(lock.token), wait=30)
            step = asyncio.ensure_future(watch.__anext__())
            while not frozen.received("W"):
                await asyncio.sleep(0.01)
            # The serving node stops answering; the other one takes over
            # without a word to the client.
            frozen.frozen = True
            fake.run(lambda: setattr(fake, "active", 1))
            while not alive.received("W"):
                await asyncio.sleep(0.01)
            assert alive.received("W") == [f"W fr 30 {lock.token}"]
            fake.run(lambda: fake.keys["fr"].grants.clear() or fake._changed("fr", fake.keys["fr"]))
            assert not (await asyncio.wait_for(step, 5)).held

    asyncio.run(main())


def test_a_node_answering_unchanged_at_once_cannot_make_a_busy_loop(fakes):
    node = fakes(script=lambda f: f"W {f[1]} token=- lease=- waiters=0 state=-" if f[0] == "W" else None)

    async def main():
        async with baton.aio.Client([node.addr]) as client:
            step = asyncio.ensure_future(client.watch("busy", seen="-", wait=10).__anext__())
            await asyncio.sleep(1)
            step.cancel()
            assert 2 <= len(node.received("W")) <= 10, len(node.received("W"))

    asyncio.run(main())


def test_a_cancelled_watch_leaves_nothing_behind(fake_cluster):
    fake = fake_cluster(1)
    node = fake.nodes[0]

    async def main():
        async with baton.aio.Client([node.addr]) as client:
            lock = await client.acquire("gone", 1, 30)
            watch = client.watch("gone", seen=str(lock.token), wait=0.5)
            task = asyncio.ensure_future(watch.__anext__())
            while not node.received("W"):
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert not [t for t in asyncio.all_tasks() if t.get_coro().cr_code.co_filename.endswith("_watch.py")]
            # The node answers the abandoned watch when its wait runs out:
            # the answer is dropped, and nothing sends it again.
            end = time.monotonic() + 5
            while sum(slot._count for slot in client._pool.slots) and time.monotonic() < end:
                await asyncio.sleep(0.05)
            assert sum(slot._count for slot in client._pool.slots) == 0, "nothing pending"
            await asyncio.sleep(0.6)
            assert len(node.received("W")) == 1
            # A new watch of the key is matched to its own answers.
            again = client.watch("gone", seen=str(lock.token), wait=5)
            step = asyncio.ensure_future(again.__anext__())
            await asyncio.sleep(0.1)
            await lock.release()
            assert not (await asyncio.wait_for(step, 5)).held

    asyncio.run(main())


def test_a_blocking_watch_closed_from_another_thread_stops(fake_cluster):
    node = fake_cluster(1).nodes[0]
    with baton.Client(node.addr) as client:
        lock = client.acquire("b", 1, 30)
        watch = client.watch("b", seen=str(lock.token), wait=30)
        threading.Timer(0.3, watch.close).start()
        start = time.monotonic()
        with pytest.raises(StopIteration):
            next(watch)
        assert time.monotonic() - start < 3
        assert list(watch) == []


def test_closing_the_client_ends_a_waiting_watch(fake_cluster):
    node = fake_cluster(1).nodes[0]

    async def main():
        client = baton.aio.Client([node.addr])
        await client.connect()
        watch = client.watch("z", seen="-", wait=30)
        step = asyncio.ensure_future(watch.__anext__())
        while not node.received("W"):
            await asyncio.sleep(0.01)
        await client.close()
        with pytest.raises(baton.Closed):
            await asyncio.wait_for(step, 5)

    asyncio.run(main())


def test_the_new_error_lines(fake_cluster):
    fake = fake_cluster(1)
    node = fake.nodes[0]
    with baton.Client(node.addr) as client:
        for call in (
            lambda: next(iter(client.watch("secret/x", seen="-"))),
            lambda: client.set_value("secret/x", 5, "v"),
            lambda: client.acquire("secret/x", 1, 30, value="v"),
        ):
            with pytest.raises(baton.PermissionDenied):
                call()
        node.max_watches = 0
        with pytest.raises(baton.Rejected) as refused:
            next(iter(client.watch("k", seen="-")))
        assert refused.value.reason == "too many watches"
        node.old = True  # a 1.1 node
        with pytest.raises(baton.Unsupported):
            next(iter(client.watch("k", seen="-")))
        with pytest.raises(baton.Unsupported):
            client.set_value("k", 5, "v")
        with pytest.raises(baton.Unsupported):
            client.acquire("k", 1, 30, permits=2)
        assert isinstance(baton.Unsupported("x"), baton.Rejected)
        lock = client.acquire("k", 1, 30)  # a plain acquire still works
        lock.release()
        [reply] = client.status()
        assert reply.status is not None and reply.status.protocol == "1.2"


@pytest.mark.parametrize(
    "answer, call, error",
    [
        ("E A k too many locks", lambda c: c.acquire("k", 1, 30, permits=2), baton.Rejected),
        ("E A k unknown option x", lambda c: c.acquire("k", 1, 30, value="v"), baton.Rejected),
        ("E A k too many fields", lambda c: c.acquire("k", 1, 30), baton.Rejected),
        ("E A k too many fields", lambda c: c.acquire("k", 1, 30, shared=True), baton.Unsupported),
        ("E V k value has a forbidden byte 0x01", lambda c: c.set_value("k", 5, "v"), baton.Rejected),
        ("E W k seen must be - or a state tag from a Q or W answer",
         lambda c: next(c.watch("k", seen="-")), baton.Rejected),
    ],
)
def test_the_nodes_other_refusals_are_rejected(fakes, answer, call, error):
    node = fakes(script=lambda f: answer if f[0] in ("A", "V", "W") else None)
    with baton.Client(node.addr) as client:
        with pytest.raises(error) as refused:
            call(client)
        assert type(refused.value) is error and refused.value.reason == answer.split(" ", 3)[3]


def test_unknown_op_goes_to_the_oldest_pending_newer_request(fake_cluster):
    node = fake_cluster(1).nodes[0]
    node.old = True

    async def main():
        async with baton.aio.Client([node.addr]) as client:
            lock = await client.acquire("q", 1, 30)
            # Round-robin over two connections: each gets two of these.
            calls = [
                call for _ in range(2)
                for call in (client.set_value("q", lock.token, "v"), client.watch("q", seen="-").__anext__())
            ]
            results = await asyncio.wait_for(
                asyncio.gather(*calls, client.inspect("q"), return_exceptions=True), 5
            )
            assert all(isinstance(r, baton.Unsupported) for r in results[:4]), results
            assert results[4].token == lock.token
            assert len(node.received("V")) == len(node.received("W")) == 2

    asyncio.run(main())


def test_an_election(fake_cluster):
    fake = fake_cluster(1)
    node = fake.nodes[0]
    with baton.Client(node.addr) as a, baton.Client(node.addr) as b:
        ea, eb = a.election("leader", lease=30), b.election("leader", lease=30)
        assert ea.leader() is None
        with pytest.raises(baton.NotLeader):
            ea.proclaim("x")
        observed = []
        observer = b.election("leader").observe(wait=0.3)
        observed.append(next(observer))
        lock = ea.campaign("node-a")
        assert node.received("A")[-1] == "A leader 0 30 value=node-a"
        assert ea.lock is lock and eb.lock is None
        assert ea.leader() == baton.Leader("node-a", lock.token) == eb.leader()
        observed.append(next(observer))
        ea.proclaim("node-a2")
        assert node.received("V")[-1] == f"V leader {lock.token} node-a2"
        observed.append(next(observer))
        assert ea.campaign("node-a3") is lock, "campaigning while leading proclaims"
        observed.append(next(observer))
        result = {}
        waiting = threading.Thread(target=lambda: result.setdefault("lock", eb.campaign("node-b")))
        waiting.start()
        poll(lambda: len(node.received("A")) == 2, 5, "the second candidate to queue")
        ea.resign()
        ea.resign()  # nothing to give up
        waiting.join(5)
        observed.append(next(observer))
        assert eb.lock is result["lock"] and ea.lock is None
        with eb.lock:
            pass
        observed.append(next(observer))
        observer.close()
        tokens = [None if o is None else o.token for o in observed]
        assert [None if o is None else o.value for o in observed] == [
            None, "node-a", "node-a2", "node-a3", "node-b", None
        ]
        assert tokens[1] == tokens[2] == tokens[3] == lock.token < tokens[4]


def test_an_async_election(fake_cluster):
    node = fake_cluster(1).nodes[0]

    async def main():
        async with baton.aio.Client([node.addr]) as client:
            election = client.election("ae", lease=30)
            async with election.observe(wait=0.3) as observer:
                assert await observer.__anext__() is None
                async with await election.campaign("me") as lock:
                    assert election.lock is lock
                    leader = await observer.__anext__()
                    assert leader == baton.Leader("me", lock.token)
                assert election.lock is None
                assert await observer.__anext__() is None
            with pytest.raises(StopAsyncIteration):
                await observer.__anext__()

    asyncio.run(main())
