"""Fencing a SQL row: the write happens only if no newer holder wrote first.

    python fence_sql.py [host:port ...]      (default 127.0.0.1:7411)

Each row carries a `fence` column (0 at first). The update and the token
check are one statement, so they are atomic:

    UPDATE accounts SET balance = ?, fence = ? WHERE id = ? AND fence <= ?

0 rows updated: a newer holder got there first; `baton.fence.sql_update`
then raises `StaleToken`. sqlite3 here; the same call works on any DB-API 2
connection (psycopg, psycopg2, PyMySQL, mysqlclient), in the placeholders
its driver declares, and `sql_update_async` on asyncpg. Declare the fence
column to hold the tokens: see docs/fencing.md.
"""

import sqlite3
import sys

import baton
from baton.fence import StaleToken, sql_update


def main(servers):
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER, fence INTEGER NOT NULL DEFAULT 0)")
    db.execute("INSERT INTO accounts (id, balance) VALUES (42, 100)")
    with baton.Client(servers) as client:
        with client.lock("accounts/42", wait=5, lease=30) as lock:
            (balance,) = db.execute("SELECT balance FROM accounts WHERE id = 42").fetchone()
            sql_update(db, "accounts", {"balance": balance + 10}, {"id": 42}, lock.token)
            db.commit()
        old = lock.token
        with client.lock("accounts/42", wait=5, lease=30) as newer:
            sql_update(db, "accounts", {"balance": 0}, {"id": 42}, newer.token)
            db.commit()
    # The first holder, waking up late with its old token, is refused.
    try:
        sql_update(db, "accounts", {"balance": -1}, {"id": 42}, old)
        raise SystemExit("a stale token was admitted")
    except StaleToken as err:
        print("refused:", err)
    print("balance:", db.execute("SELECT balance, fence FROM accounts WHERE id = 42").fetchone())


if __name__ == "__main__":
    main(sys.argv[1:] or ["127.0.0.1:7411"])
