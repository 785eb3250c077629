"""The fencing helpers, and the examples that show them, run against a node."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading

import pytest

from baton.fence import Fence, StaleToken, conditional_put, publish_dir, sql_update, write_file

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")
sys.path.insert(0, EXAMPLES)

from fence_s3 import MemoryStore  # noqa: E402


@pytest.mark.parametrize("example", ["fence_sql.py", "fence_files.py", "fence_s3.py"])
def test_examples_run(node, example):
    out = subprocess.run([sys.executable, os.path.join(EXAMPLES, example), node.addr],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "refused:" in out.stdout


def test_sql_update_is_fenced():
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (id INTEGER, v TEXT, fence INTEGER NOT NULL DEFAULT 0)")
    db.execute("INSERT INTO t (id, v) VALUES (1, 'a')")
    assert sql_update(db, "t", {"v": "b"}, {"id": 1}, 5) == 1
    assert sql_update(db, "t", {"v": "c"}, {"id": 1}, 5) == 1  # the same holder again
    with pytest.raises(StaleToken) as err:
        sql_update(db, "t", {"v": "d"}, {"id": 1}, 4)
    assert err.value.highest == 5
    with pytest.raises(StaleToken):
        sql_update(db, "t", {"v": "d"}, {"id": 1}, 5, reentrant=False)
    with pytest.raises(LookupError):
        sql_update(db, "t", {"v": "d"}, {"id": 2}, 9)
    with pytest.raises(ValueError):
        sql_update(db, "t; DROP TABLE t", {"v": "d"}, {"id": 1}, 9)
    assert db.execute("SELECT v, fence FROM t").fetchone() == ("c", 5)


def test_file_and_dir_fences(tmp_path):
    path = str(tmp_path / "f")
    write_file(path, b"1", 10)
    with pytest.raises(StaleToken):
        write_file(path, b"0", 9)
    write_file(path, b"2", 11)
    assert open(path, "rb").read() == b"2"
    link = str(tmp_path / "d")
    publish_dir(link, lambda p: open(os.path.join(p, "x"), "w").close(), 3)
    with pytest.raises(StaleToken):
        publish_dir(link, lambda p: None, 2)
    assert os.readlink(link) == "d.3" and os.path.exists(os.path.join(link, "x"))
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".build-")]


def test_concurrent_conditional_puts_keep_the_newest():
    store = MemoryStore()
    results = []

    def put(token):
        try:
            conditional_put(store, "o", str(token).encode(), token, attempts=50)
            results.append(token)
        except StaleToken:
            pass

    threads = [threading.Thread(target=put, args=(t,)) for t in range(1, 30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert store.get("o") == b"29" and store.head("o")[1]["fence"] == "29"


def test_memory_fence():
    fence = Fence()
    fence.admit(3)
    fence.admit(3)
    with pytest.raises(StaleToken):
        fence.admit(2)
