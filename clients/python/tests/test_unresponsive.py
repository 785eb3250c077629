"""A node that stops answering, against scripted fake nodes: a silent
connection with requests in flight is probed with `S`, and a probe left
unanswered fails it over like a cut one; `TimedOut` only for a node's `T`;
a redirect to a down node dials it at once."""

from __future__ import annotations

import asyncio
import time

import pytest

import baton
from scripted import fakes, poll, reserved_port  # noqa: F401 (fakes is a fixture)


def test_a_silent_connection_is_probed_then_failed_over(fakes):
    frozen, alive = fakes(token_base=1000), fakes(token_base=5000)

    async def main():
        async with baton.aio.Client([frozen.addr, alive.addr], unresponsive_timeout=1.0) as client:
            frozen.frozen.set()
            start = time.monotonic()
            # Round-robin: one of the two goes to the frozen node.
            locks = await asyncio.gather(*(client.acquire(f"k{i}", 5, 30) for i in range(2)))
            took = time.monotonic() - start
            assert all(lock.token > 5000 for lock in locks), "both granted by the node that answers"
            assert len(frozen.received("A")) == 1
            return took

    took = asyncio.run(main())
    # Probed after a quarter of the timeout of silence, cut at the timeout.
    assert frozen.received("S")[1:], "the silent connection was probed"
    assert 0.9 < took < 2.5, took
    poll(lambda: frozen.closed_by_client >= 1, 2, "the frozen node's connection closed")


def test_a_release_and_a_renewal_are_retried_elsewhere(fakes):
    frozen, alive = fakes(), fakes()
    with baton.Client([frozen.addr, alive.addr], unresponsive_timeout=1.0) as client:
        frozen.frozen.set()
        start = time.monotonic()
        for i in range(2):  # round-robin: one of each goes to the frozen node
            client.renew(f"k{i}", 7, 30)
            client.release(f"k{i}", 7)
        assert time.monotonic() - start < 5
        assert len(alive.received("R")) == 2 and len(alive.received("K")) == 2


def test_wait_zero_against_a_frozen_node_ends_as_no_server(fakes):
    frozen = fakes()

    async def main():
        async with baton.aio.Client(
            [frozen.addr], unresponsive_timeout=0.5, connect_timeout=0.5
        ) as client:
            frozen.frozen.set()
            start = time.monotonic()
            with pytest.raises(baton.NoServer):
                await asyncio.wait_for(client.acquire("k", 0, 30), 15)
            return time.monotonic() - start

    took = asyncio.run(main())
    assert took < 8, took


def test_a_wait_that_runs_out_unanswered_is_no_server_not_timed_out(fakes):
    frozen = fakes()
    with baton.Client([frozen.addr], unresponsive_timeout=0.5, connect_timeout=0.5) as client:
        frozen.frozen.set()
        with pytest.raises(baton.NoServer) as caught:
            client.acquire("k", 1, 30)
        assert not isinstance(caught.value, baton.TimedOut)


def test_timed_out_is_the_nodes_t_and_a_builtin_timeout_error(fakes):
    node = fakes(script=lambda f: f"T {f[1]}" if f[0] == "A" else None)
    with baton.Client([node.addr]) as client:
        with pytest.raises(TimeoutError):
            client.acquire("k", 1, 30)
        with pytest.raises(baton.TimedOut):
            client.acquire("k", 1, 30)


def test_a_node_frozen_before_the_dial_is_not_used(fakes):
    frozen = fakes()
    frozen.frozen.set()  # its kernel still accepts the TCP connection
    start = time.monotonic()
    with pytest.raises(baton.NoServer):
        baton.Client([frozen.addr], connect_timeout=0.5)
    assert time.monotonic() - start < 3
    assert frozen.received("S"), "the dial waited for an answer to S"


def test_a_redirect_to_a_down_node_dials_it_at_once(fakes):
    port = reserved_port()
    target = f"127.0.0.1:{port}"
    redirecting = fakes(script=lambda f: f"M A {f[1]} {target}" if f[0] == "A" else None)

    async def main():
        async with baton.aio.Client([redirecting.addr, target]) as client:
            # The second node was down when the client dialled it; it comes
            # up now, and the background redial is 3 s away.
            serving = fakes(port=port, token_base=9000)
            start = time.monotonic()
            lock = await client.acquire("k", 5, 30)
            took = time.monotonic() - start
            assert lock.token > 9000 and serving.received("A")
            return took

    took = asyncio.run(main())
    assert took < 1.5, f"redirect followed after {took:.2f} s"


def test_try_acquire_follows_a_redirect_to_a_node_not_given(fakes):
    serving = fakes(token_base=7000)
    standby = fakes(script=lambda f: f"M A {f[1]} {serving.addr}" if f[0] == "A" else None)
    with baton.Client([standby.addr]) as client:
        lock = client.try_acquire("k", 30)
        assert lock is not None and lock.token > 7000


def test_new_requests_avoid_a_connection_under_probe(fakes):
    frozen, alive = fakes(), fakes()

    async def main():
        async with baton.aio.Client([frozen.addr, alive.addr], unresponsive_timeout=3.0) as client:
            frozen.frozen.set()
            stuck = [asyncio.ensure_future(client.acquire(f"s{i}", 5, 30)) for i in range(2)]
            while len(frozen.received("S")) < 2:  # the handshake, then the probe
                await asyncio.sleep(0.01)
            # While the probe is out, every new request goes to the other node.
            start = time.monotonic()
            for i in range(4):
                await client.inspect(f"q{i}")
            assert time.monotonic() - start < 1
            assert not frozen.received("Q")
            await asyncio.gather(*stuck)

    asyncio.run(main())


def test_a_renewal_on_a_silent_connection_is_sent_elsewhere_too(fakes):
    frozen, alive = fakes(), fakes()
    # Noticed only after 20 s: the renewals cannot wait for that.
    with baton.Client([frozen.addr, alive.addr], unresponsive_timeout=20) as client:
        frozen.frozen.set()
        start = time.monotonic()
        for i in range(2):  # round-robin: one goes to the frozen node first
            client.renew(f"k{i}", 7, 3)
        assert time.monotonic() - start < 2.5
        assert len(frozen.received("K")) == 1 and len(alive.received("K")) == 2


def test_a_redirect_to_a_silent_node_is_not_followed(fakes):
    # A Raft follower names the leader it last heard until it hears of a
    # new one: while that leader is frozen, a renewal it redirects must
    # not be sent to it (and wait there), but asked again elsewhere.
    frozen = fakes(token_base=1000)
    elected = asyncio.Event()

    def follower(fields):
        if fields[0] in ("A", "K") and not (fields[0] == "K" and elected.is_set()):
            return f"M {fields[0]} {fields[1]} {frozen.addr}"
        return None

    other = fakes(token_base=5000, script=follower)

    async def main():
        async with baton.aio.Client([frozen.addr, other.addr], unresponsive_timeout=20) as client:
            frozen.frozen.set()
            # An acquire goes to the frozen node (directly, or redirected
            # there) and waits: the connection owes an answer and is silent.
            stuck = asyncio.ensure_future(client.acquire("held", 30, 30))
            while not frozen.received("A"):
                await asyncio.sleep(0.01)
            await asyncio.sleep(1.2)
            asyncio.get_running_loop().call_later(0.3, elected.set)
            await client.renew("k", 7, 3)
            assert not frozen.received("K"), "a renewal was sent to a silent node"
            stuck.cancel()

    asyncio.run(main())
