"""The fencing helpers, and the examples that show them, run against a node."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from typing import Any, Dict, List, Optional, Tuple

import pytest

import baton
import sql_servers
from baton.fence import (
    SIGNED_BIGINT_MAX,
    UNSIGNED_BIGINT_MAX,
    Fence,
    StaleToken,
    TokenOutOfRange,
    conditional_put,
    paramstyle_of,
    publish_dir,
    sql_update,
    sql_update_async,
    write_file,
)

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")
sys.path.insert(0, EXAMPLES)

from fence_s3 import MemoryStore  # noqa: E402


@pytest.mark.parametrize("example", ["fence_sql.py", "fence_files.py", "fence_s3.py"])
def test_examples_run(node, example, tmp_path):
    out = subprocess.run([sys.executable, os.path.join(EXAMPLES, example), node.addr],
                         capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, TMPDIR=str(tmp_path)))
    assert out.returncode == 0, out.stderr
    assert "refused:" in out.stdout
    assert os.listdir(tmp_path) == [], "the example left its scratch files behind"


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


# SQL, through each driver, against real servers (tests/sql_servers.py).


class Db:
    """One connection of a driver, blocking or asyncio, with the few calls
    the tests need; commits after each."""

    def __init__(self, driver: str, conn: Any, loop: Optional[asyncio.AbstractEventLoop]) -> None:
        self.driver, self.conn, self.loop = driver, conn, loop

    def sql(self, text: str) -> List[Tuple[Any, ...]]:
        """Runs `text` (no parameters); its rows, if any."""
        if self.loop is not None:
            return self.loop.run_until_complete(self._sql_async(text))
        cursor = self.conn.cursor()
        cursor.execute(text)
        rows = [tuple(r) for r in cursor.fetchall()] if cursor.description else []
        cursor.close()
        self.conn.commit()
        return rows

    async def _sql_async(self, text: str) -> List[Tuple[Any, ...]]:
        if self.driver == "asyncpg":
            return [tuple(r) for r in await self.conn.fetch(text)]
        async with self.conn.cursor() as cursor:
            await cursor.execute(text)
            rows = [tuple(r) for r in await cursor.fetchall()] if cursor.description else []
        await self.conn.commit()
        return rows

    def update(self, table: str, values: Dict[str, Any], token: int, **kw: Any) -> int:
        """`sql_update` (or `sql_update_async`) of row 1 of `table`, committed."""
        if self.loop is not None:
            return self.loop.run_until_complete(self._update_async(table, values, token, **kw))
        try:
            updated = sql_update(self.conn, table, values, {"id": 1}, token, **kw)
        except BaseException:
            self.conn.rollback()
            raise
        self.conn.commit()
        return updated

    async def _update_async(self, table: str, values: Dict[str, Any], token: int, **kw: Any) -> int:
        if self.driver == "asyncpg":
            return await sql_update_async(self.conn, table, values, {"id": 1}, token, **kw)
        try:
            updated = await sql_update_async(self.conn, table, values, {"id": 1}, token, **kw)
        except BaseException:
            await self.conn.rollback()
            raise
        await self.conn.commit()
        return updated

    def close(self) -> None:
        if self.loop is not None:
            self.loop.run_until_complete(self.conn.close())
            self.loop.close()
        else:
            self.conn.close()


# driver -> the server it talks to.
DRIVERS = {
    "sqlite3": "sqlite",
    "psycopg": "postgres",
    "psycopg2": "postgres",
    "asyncpg": "postgres",
    "psycopg-async": "postgres",
    "pymysql": "mariadb",
    "mysqlclient": "mariadb",
}

# server -> the fence column types to declare: (signed, unsigned).
COLUMNS = {
    "sqlite": ("INTEGER", None),
    "postgres": ("bigint", "numeric(20)"),
    "mariadb": ("BIGINT", "BIGINT UNSIGNED"),
}

MARIADB_DATABASE = "baton_fence"


@pytest.fixture(scope="session")
def started_servers():
    """The servers started so far, by kind; each starts on first use."""
    started: Dict[str, sql_servers.Server] = {}
    yield started
    for server in started.values():
        server.stop()


def server_port(started: Dict[str, Any], kind: str) -> int:
    if kind not in started:
        if kind == "postgres":
            started[kind] = sql_servers.start_postgres()
        else:
            started[kind] = sql_servers.start_mariadb()
            pymysql = sql_servers.driver("pymysql")
            conn = pymysql.connect(host="127.0.0.1", port=started[kind].port, user="root")
            conn.cursor().execute(f"CREATE DATABASE IF NOT EXISTS {MARIADB_DATABASE}")
            conn.close()
    return int(started[kind].port)


def connect(driver: str, started: Dict[str, Any], sqlite_path: str) -> Db:
    if driver == "sqlite3":
        return Db(driver, sqlite3.connect(sqlite_path), None)
    port = server_port(started, DRIVERS[driver])
    pg = {"host": "127.0.0.1", "port": port, "user": "postgres", "dbname": "postgres"}
    if driver == "psycopg":
        return Db(driver, sql_servers.driver("psycopg").connect(**pg), None)
    if driver == "psycopg2":
        return Db(driver, sql_servers.driver("psycopg2").connect(**pg), None)
    if driver in ("asyncpg", "psycopg-async"):
        loop = asyncio.new_event_loop()
        if driver == "asyncpg":
            asyncpg = sql_servers.driver("asyncpg")
            opening = asyncpg.connect(host="127.0.0.1", port=port, user="postgres", database="postgres")
        else:
            opening = sql_servers.driver("psycopg").AsyncConnection.connect(**pg)
        return Db(driver, loop.run_until_complete(opening), loop)
    my = {"host": "127.0.0.1", "port": port, "user": "root", "database": MARIADB_DATABASE}
    if driver == "pymysql":
        return Db(driver, sql_servers.driver("pymysql").connect(**my), None)
    reason = "mysqlclient is not installed (it builds against libmariadb-dev with pkg-config and a C compiler)"
    return Db(driver, sql_servers.driver("MySQLdb", reason).connect(**my), None)


@pytest.fixture
def open_db(started_servers, tmp_path):
    """`open_db(driver)`: a new connection; all are closed at teardown."""
    opened: List[Db] = []

    def open_one(driver: str) -> Db:
        db = connect(driver, started_servers, str(tmp_path / "fence.sqlite3"))
        opened.append(db)
        return db

    yield open_one
    for db in opened:
        db.close()


def make_table(db: Db, column_type: str) -> str:
    """A fresh table with row 1 (fence 0) whose fence column is `column_type`."""
    table = f"fenced_{uuid.uuid4().hex[:12]}"
    db.sql(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, v VARCHAR(40), fence {column_type} NOT NULL DEFAULT 0)")
    db.sql(f"INSERT INTO {table} (id, v) VALUES (1, 'start')")
    return table


def row(db: Db, table: str) -> Tuple[str, int]:
    (v, fence), = db.sql(f"SELECT v, fence FROM {table} WHERE id = 1")
    return v, int(fence)


@pytest.mark.parametrize("driver", list(DRIVERS))
def test_kleppmann_scenario_refuses_the_paused_client(node, open_db, driver):
    """Client A takes a 1 s lease and pauses 1.5 s; B acquires and writes;
    A wakes and writes with its token: refused, B's write stays."""
    db_a, db_b = open_db(driver), open_db(driver)
    table = make_table(db_a, COLUMNS[DRIVERS[driver]][0])
    key = f"fence/{driver}"
    with baton.Client([node.addr]) as a, baton.Client([node.addr]) as b:
        lock_a = a.acquire(key, wait=5, lease=1)
        time.sleep(1.5)  # A's pause: its lease lapses meanwhile
        lock_b = b.acquire(key, wait=5, lease=30)
        assert lock_b.token > lock_a.token
        assert db_b.update(table, {"v": "written by B"}, lock_b.token) == 1
        with pytest.raises(StaleToken) as refused:
            db_a.update(table, {"v": "written by A"}, lock_a.token)
        assert (refused.value.token, refused.value.highest) == (lock_a.token, lock_b.token)
        lock_b.release()
    assert row(db_b, table) == ("written by B", lock_b.token)


@pytest.mark.parametrize("driver", list(DRIVERS))
def test_sql_update_admits_the_holder_and_refuses_older_tokens(open_db, driver):
    db = open_db(driver)
    table = make_table(db, COLUMNS[DRIVERS[driver]][0])
    token = 1 << 60
    assert db.update(table, {"v": "b"}, token) == 1
    # The same holder again, with the same values: MySQL counts no changed
    # row, and that is not a stale token.
    assert db.update(table, {"v": "b"}, token) == 1
    assert db.update(table, {"v": "c"}, token) == 1
    with pytest.raises(StaleToken) as err:
        db.update(table, {"v": "d"}, token - 1)
    assert err.value.highest == token
    with pytest.raises(StaleToken):
        db.update(table, {"v": "d"}, token, reentrant=False)
    assert db.update(table, {"v": "e"}, token + 1, reentrant=False) == 1
    with pytest.raises(ValueError):
        db.update(f"{table}; DROP TABLE {table}", {"v": "d"}, token + 2)
    with pytest.raises(ValueError):
        db.update(table, {"v": "d"}, 0)
    assert row(db, table) == ("e", token + 1)
    db.sql(f"DELETE FROM {table}")
    with pytest.raises(LookupError):
        db.update(table, {"v": "d"}, token + 2)


@pytest.mark.parametrize("driver", list(DRIVERS))
def test_tokens_the_column_cannot_hold_are_refused(open_db, driver):
    """Signed 64-bit columns refuse 2^63 and up, unsigned ones (found in
    the catalog, or told by `column_max`) hold every token; nothing is
    clamped or wrapped."""
    db = open_db(driver)
    signed, unsigned = COLUMNS[DRIVERS[driver]]
    table = make_table(db, signed)
    for told in ({}, {"column_max": UNSIGNED_BIGINT_MAX}):
        with pytest.raises(TokenOutOfRange):
            db.update(table, {"v": "wrapped"}, SIGNED_BIGINT_MAX + 1, **(told if unsigned is None else {}))
    assert db.update(table, {"v": "max"}, SIGNED_BIGINT_MAX) == 1
    assert row(db, table) == ("max", SIGNED_BIGINT_MAX)
    if unsigned is None:
        return
    table = make_table(db, unsigned)
    with pytest.raises(TokenOutOfRange):  # told less than the column holds: the caller's word
        db.update(table, {"v": "told"}, SIGNED_BIGINT_MAX + 1, column_max=SIGNED_BIGINT_MAX)
    assert db.update(table, {"v": "high"}, SIGNED_BIGINT_MAX + 5) == 1  # the catalog says unsigned
    with pytest.raises(StaleToken) as err:
        db.update(table, {"v": "stale"}, SIGNED_BIGINT_MAX + 4)
    assert err.value.highest == SIGNED_BIGINT_MAX + 5
    wide = {"column_max": UNSIGNED_BIGINT_MAX}
    assert db.update(table, {"v": "top"}, UNSIGNED_BIGINT_MAX, **wide) == 1
    for told in ({}, wide):
        with pytest.raises(TokenOutOfRange):
            db.update(table, {"v": "beyond"}, UNSIGNED_BIGINT_MAX + 1, **told)
    assert row(db, table) == ("top", UNSIGNED_BIGINT_MAX)


@pytest.mark.parametrize(
    "driver, style",
    [("sqlite3", "qmark"), ("psycopg", "pyformat"), ("psycopg2", "pyformat"), ("asyncpg", "dollar"),
     ("psycopg-async", "pyformat"), ("pymysql", "pyformat"), ("mysqlclient", "format")],
)
def test_the_driver_declares_its_paramstyle(open_db, driver, style):
    assert paramstyle_of(open_db(driver).conn) == style


@pytest.mark.parametrize("style", ["qmark", "numeric", "named"])
def test_every_style_sqlite3_knows_works(style):
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT, fence INTEGER NOT NULL DEFAULT 0)")
    db.execute("INSERT INTO t (id, v) VALUES (1, 'a')")
    assert sql_update(db, "t", {"v": "b"}, {"id": 1}, 5, paramstyle=style) == 1
    with pytest.raises(StaleToken):
        sql_update(db, "t", {"v": "c"}, {"id": 1}, 4, paramstyle=style)
    with pytest.raises(ValueError):
        sql_update(db, "t", {"v": "c"}, {"id": 1}, 6, paramstyle="percent")
    assert db.execute("SELECT v, fence FROM t").fetchone() == ("b", 5)


def test_a_driver_without_paramstyle_must_be_told():
    class Unknown:  # defined here: this test module declares no paramstyle
        pass

    with pytest.raises(ValueError, match="paramstyle="):
        sql_update(Unknown(), "t", {"v": "b"}, {"id": 1}, 5)
