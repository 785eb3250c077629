"""The API against one real node: acquire, try_acquire, lock, renew,
release, inspect, status, close; validation before anything is sent."""

from __future__ import annotations

import asyncio
import datetime
import time

import pytest

import baton
from baton import _proto
from conftest import wait_for


def test_lock_acquire_renew_release_inspect_status(node):
    with baton.Client([node.addr]) as client:
        with client.lock("orders/42", wait=5, lease=30) as lock:
            state = client.inspect("orders/42")
            assert state.held and state.token == lock.token and 29 < state.lease_left <= 30
            assert client.try_acquire("orders/42", lease=30) is None
        assert not client.inspect("orders/42").held
        lock = client.acquire("orders/42", wait=5, lease=30)
        assert lock.token > state.token
        lock.renew(lease=60)
        assert client.inspect("orders/42").lease_left > 59
        lock.renew(lease=datetime.timedelta(seconds=90))
        assert client.inspect("orders/42").lease_left > 89
        lock.release()
        with pytest.raises(baton.NotHeld):
            client.release("orders/42", lock.token)
        other = client.try_acquire("orders/42", lease=0.5)
        assert other is not None and other.token > lock.token
        [node_status] = client.status()
        assert node_status.ok and node_status.status.role == "single"
        assert node_status.status.token >= other.token


def test_timed_out_and_rejected(node):
    with baton.Client(node.addr) as client:
        held = client.acquire("k", 0, 30)
        start = time.monotonic()
        with pytest.raises(baton.TimedOut):
            client.acquire("k", 0.3, 30)
        assert 0.25 < time.monotonic() - start < 3
        with pytest.raises(baton.Rejected) as err:
            client.acquire("x", 0, 10 * 86400)  # beyond the node's max lease
        assert "lease" in err.value.reason
        held.release()


def test_durations_on_the_wire():
    assert _proto.to_ms(0.3, "w", zero_ok=True) == 300
    assert _proto.to_ms(2.125, "w", zero_ok=True) == 2125
    assert _proto.to_ms(0.0001, "w", zero_ok=True) == 1
    assert _proto.to_ms(datetime.timedelta(milliseconds=1500), "w", zero_ok=True) == 1500
    assert _proto.seconds_text(2125) == b"2.125" and _proto.seconds_text(500) == b"0.5"
    assert _proto.seconds_text(30000) == b"30"
    for bad in (-1, float("nan"), float("inf"), True, "5", None, 2.0**70):
        with pytest.raises(baton.InvalidArgument):
            _proto.to_ms(bad, "lease", zero_ok=False)
    with pytest.raises(baton.InvalidArgument):
        _proto.to_ms(0, "lease", zero_ok=False)


def test_bad_input_raises_and_sends_nothing(node, proxies):
    proxy = proxies(node.addr)
    with baton.Client([proxy.addr]) as client:
        client.inspect("warm")
        before = proxy.bytes_up
        for key in ("", "a b", "tab\tkey", "nl\n", "x" * 251, "del\x7f", b"\x00"):
            with pytest.raises(baton.InvalidArgument):
                client.acquire(key, 1, 1)
            with pytest.raises(baton.InvalidArgument):
                client.inspect(key)
        for lease in (0, -1, datetime.timedelta(0), float("nan")):
            with pytest.raises(baton.InvalidArgument):
                client.acquire("k", 1, lease)
            with pytest.raises(baton.InvalidArgument):
                client.lock("k", 1, lease)
        with pytest.raises(baton.InvalidArgument):
            client.acquire("k", -1, 1)
        with pytest.raises(baton.InvalidArgument):
            client.release("k", 0)
        assert proxy.bytes_up == before
    for user, secret in (("a b", "s"), ("u", "s s"), ("u", ""), ("", "s"), ("u", None)):
        with pytest.raises(baton.InvalidArgument):
            baton.Client([node.addr], user=user, secret=secret)
    for servers in ([], ["nohost"], ["h:0"], ["h:99999"]):
        with pytest.raises(baton.InvalidArgument):
            baton.Client(servers)


def test_utf8_keys_and_errors_are_under_error(node):
    assert issubclass(baton.TimedOut, baton.Error) and baton.Error.TimedOut is baton.TimedOut
    with baton.Client([node.addr]) as client:
        lock = client.acquire("clé/ü", 1, 30)
        assert client.inspect("clé/ü").token == lock.token
        lock.release()


def test_no_server():
    from conftest import free_ports

    start = time.monotonic()
    with pytest.raises(baton.NoServer):
        baton.Client([f"127.0.0.1:{free_ports(1)[0]}"], connect_timeout=1)
    assert time.monotonic() - start < 3


def test_close_releases_held_locks_and_then_refuses(node):
    client = baton.Client([node.addr])
    client.acquire("a", 1, 30)
    client.acquire("b", 1, 30)
    client.close()
    client.close()
    with baton.Client([node.addr]) as other:
        assert not other.inspect("a").held and not other.inspect("b").held
    with pytest.raises(baton.Closed):
        client.acquire("c", 1, 30)


def test_lease_lost_on_renew_and_on_exit(node):
    with baton.Client([node.addr]) as client:
        lock = client.acquire("short", 1, 0.2)
        wait_for(lambda: not client.inspect("short").held, 5, "the lease to expire")
        with pytest.raises(baton.LeaseLost):
            lock.renew()
        assert lock.lost.is_set()
        with pytest.raises(baton.LeaseLost):
            with client.lock("short2", wait=1, lease=0.2) as held:
                held._inner._stop_keep_alive()
                wait_for(lambda: not client.inspect("short2").held, 5, "the lease to expire")


def test_a_try_acquire_slowed_in_the_client_still_asks_the_node(node, monkeypatch):
    """try_acquire's 1 ms wait may be used up before the line is sent (a busy
    machine): the node, not the client's own delay, says whether it is free."""
    from baton.aio import _pool

    pick = _pool.Pool.pick

    async def slow_pick(self, until, key=None):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0.02)
        return await pick(self, until, key)

    with baton.Client(node.addr) as client:
        client.status()
        monkeypatch.setattr(_pool.Pool, "pick", slow_pick)
        lock = client.try_acquire("slow-client", lease=5)
        assert lock is not None, "the key is free"
        assert client.try_acquire("slow-client", lease=5) is None, "the node says it is held"
        lock.release()
