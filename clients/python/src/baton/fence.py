"""Fencing on the protected resource's side: refuse stale tokens.

Every grant's token is greater than every token before it, cluster-wide.
A resource that remembers the highest token it has seen and refuses lower
ones cannot be harmed by a holder that woke up after its lease lapsed, even
if the lock service briefly let two holders overlap (a failover). The check
and the change must be atomic together; these helpers do it for:

- SQL: `sql_update` runs `UPDATE ... SET ..., fence = <token> WHERE ... AND
  fence <= <token>` (`fence < <token>` with `reentrant=False`) through any
  DB-API 2 connection, in its driver's parameter style; 0 rows means a
  newer holder got there first. `sql_update_async` does the same on
  asyncpg. Both refuse a token the fence column cannot hold (its declared
  type, or `column_max`).
- files and directories: `write_file` (a fence file raised before the data
  is replaced, both under an exclusive `flock`), `publish_dir` (a symlink to
  a directory named after its token, swapped atomically).
- S3-style object stores: `conditional_put`, a read of the object's fence
  and version, then a write with an If-Match precondition on that version.
- in memory: `Fence`.

A holder may write several times with its own token (`<=`); pass
`reentrant=False` where each grant may write once.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import threading
from typing import Any, Callable, List, Mapping, Optional, Sequence, Tuple

from .errors import Error

try:  # POSIX; the file helpers need it.
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


class StaleToken(Error):
    """A newer grant has written to the resource: the caller's lease lapsed
    and it must not touch the resource any more."""

    def __init__(self, token: int, highest: Optional[int]) -> None:
        super().__init__(f"token {token} is stale: the resource has seen {highest}")
        self.token = token
        self.highest = highest


def _admits(highest: int, token: int, reentrant: bool) -> bool:
    return token > highest or (reentrant and token == highest)


class Fence:
    """The highest token seen, in memory; thread-safe."""

    def __init__(self, reentrant: bool = True) -> None:
        self._highest = 0
        self._reentrant = reentrant
        self._mutex = threading.Lock()

    @property
    def highest(self) -> int:
        return self._highest

    def admit(self, token: int) -> None:
        """Records `token`, or raises `StaleToken` if a newer one was seen."""
        with self._mutex:
            if not _admits(self._highest, token, self._reentrant):
                raise StaleToken(token, self._highest)
            self._highest = token


# SQL.

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: The largest token a signed 64-bit column holds: PostgreSQL `bigint`,
#: MySQL/MariaDB `BIGINT`, SQLite `INTEGER`. Every 64-bit column holds the
#: tokens up to here.
SIGNED_BIGINT_MAX = 2**63 - 1

#: The largest token there is (tokens are unsigned 64-bit): what PostgreSQL
#: `numeric(20)` and MySQL/MariaDB `BIGINT UNSIGNED` hold.
UNSIGNED_BIGINT_MAX = 2**64 - 1

# The server behind each driver package (the tested ones): a catalog that
# tells the fence column's declared type, or SQLite's signed integers. A
# driver not named here is held to SIGNED_BIGINT_MAX unless given
# column_max.
_SERVERS = {
    "psycopg": "postgres",
    "psycopg2": "postgres",
    "asyncpg": "postgres",
    "pymysql": "mysql",
    "MySQLdb": "mysql",
    "sqlite3": "sqlite",
}

_DECIMAL = re.compile(r"^(?:numeric|decimal)\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)")

# The DB-API 2 parameter styles (PEP 249), and asyncpg's `$1`.
_STYLES = ("qmark", "numeric", "named", "format", "pyformat", "dollar")


class TokenOutOfRange(Error, ValueError):
    """The token does not fit the fence column (`column_max`): writing it
    would fail or, on some servers, be clamped or wrapped, and a fence that
    wraps admits stale tokens again. Nothing was written."""

    def __init__(self, token: int, column_max: int) -> None:
        super().__init__(
            f"token {token} does not fit the fence column (at most {column_max}): declare it "
            "numeric(20) (PostgreSQL) or BIGINT UNSIGNED (MySQL)"
        )
        self.token = token
        self.column_max = column_max


def _ident(name: str) -> str:
    if not _IDENT.match(name):
        raise ValueError(f"not a plain SQL identifier: {name!r}")
    return name


def _check_token(token: int) -> None:
    if isinstance(token, bool) or not isinstance(token, int) or token < 1:
        raise ValueError(f"not a fencing token: {token!r}")


def _server_of(conn: Any) -> Optional[str]:
    return _SERVERS.get(type(conn).__module__.split(".")[0])


def _declared_limit(found: Optional[Sequence[Any]]) -> int:
    """The largest token a column holds, from its declared type as the
    catalog gives it (`numeric(20,0)`, `bigint(20) unsigned`...), when it
    holds more than a signed 64-bit integer; else `SIGNED_BIGINT_MAX`, also
    for a type or column not found (only larger tokens ask)."""
    declared = found[0] if found else None
    if isinstance(declared, (bytes, bytearray)):
        declared = declared.decode("ascii", "replace")
    text = str(declared or "").strip().lower()
    if text in ("numeric", "decimal"):  # PostgreSQL's unconstrained numeric
        return UNSIGNED_BIGINT_MAX
    decimal = _DECIMAL.match(text)
    if decimal:
        digits = max(0, int(decimal.group(1)) - int(decimal.group(2) or 0))
        return max(SIGNED_BIGINT_MAX, min(int(10**digits) - 1, UNSIGNED_BIGINT_MAX))
    if text.startswith("bigint") and "unsigned" in text:
        return UNSIGNED_BIGINT_MAX
    return SIGNED_BIGINT_MAX


def paramstyle_of(conn: Any) -> str:
    """The parameter style the driver of `conn` declares: the module-level
    `paramstyle` (PEP 249) of the package its connection class comes from
    (`psycopg`, `psycopg2`, `pymysql`, `MySQLdb`, `sqlite3`...); `dollar`
    for asyncpg. Raises `ValueError` when the driver declares none."""
    module = type(conn).__module__
    parts = module.split(".")
    if parts[0] == "asyncpg":
        return "dollar"
    for i in range(len(parts), 0, -1):
        style = getattr(sys.modules.get(".".join(parts[:i])), "paramstyle", None)
        if isinstance(style, str) and style in _STYLES:
            return style
    raise ValueError(f"the driver of {module}.{type(conn).__name__} declares no paramstyle: pass paramstyle=")


class _Params:
    """Placeholders in one parameter style, and the parameters they bind."""

    def __init__(self, style: str) -> None:
        if style not in _STYLES:
            raise ValueError(f"unknown parameter style {style!r} (one of {', '.join(_STYLES)})")
        self.style = style
        self.values: List[Any] = []

    def add(self, value: Any) -> str:
        self.values.append(value)
        n = len(self.values)
        return {
            "qmark": "?",
            "numeric": f":{n}",
            "named": f":p{n}",
            "format": "%s",
            "pyformat": f"%(p{n})s",
            "dollar": f"${n}",
        }[self.style]

    def bound(self) -> Any:
        if self.style in ("named", "pyformat"):
            return {f"p{i}": v for i, v in enumerate(self.values, 1)}
        return list(self.values)


class _Statements:
    """The fenced UPDATE, and the SELECT that tells why it changed nothing."""

    def __init__(
        self,
        style: str,
        table: str,
        values: Mapping[str, Any],
        where: Mapping[str, Any],
        token: int,
        fence_column: str,
        reentrant: bool,
    ) -> None:
        table, fence = _ident(table), _ident(fence_column)
        if not where:
            raise ValueError("where must name the row(s) to update")
        _check_token(token)
        self.style, self.table, self.fence = style, table, fence
        self.where, self.token, self.reentrant = dict(where), token, reentrant
        update = _Params(style)
        sets = [f"{_ident(column)} = {update.add(value)}" for column, value in values.items()]
        sets.append(f"{fence} = {update.add(token)}")
        conds = [f"{_ident(column)} = {update.add(value)}" for column, value in where.items()]
        cmp = "<=" if reentrant else "<"
        self.update = (
            f"UPDATE {table} SET {', '.join(sets)} WHERE {' AND '.join(conds)} "
            f"AND {fence} {cmp} {update.add(token)}"
        )
        self.update_params = update.bound()
        probe = _Params(style)
        conds = [f"{column} = {probe.add(value)}" for column, value in where.items()]
        self.probe = f"SELECT COUNT(*), MAX({fence}) FROM {table} WHERE {' AND '.join(conds)}"
        self.probe_params = probe.bound()

    def column_query(self, conn: Any, column_max: Optional[int]) -> Optional[Tuple[str, Any]]:
        """The catalog query for the fence column's declared type, when the
        limit must come from it: no `column_max` given, and a token above
        what every 64-bit column holds, on a server whose catalog we read."""
        if column_max is not None or self.token <= SIGNED_BIGINT_MAX:
            return None
        server = _server_of(conn)
        q = _Params(self.style)
        if server == "postgres":  # unquoted names fold to lower case
            sql = (
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
                f"CAST(CAST({q.add(self.table)} AS text) AS regclass) "
                f"AND attname = lower({q.add(self.fence)}) AND NOT attisdropped"
            )
        elif server == "mysql":
            sql = (
                "SELECT COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
                f"AND TABLE_NAME = {q.add(self.table)} AND COLUMN_NAME = {q.add(self.fence)}"
            )
        else:
            return None
        return sql, q.bound()

    def check_range(self, conn: Any, column_max: Optional[int], declared: Optional[Sequence[Any]]) -> None:
        """Raises `TokenOutOfRange` if the token exceeds `column_max`, or
        without it, what the `declared` type (the catalog's row) holds.
        SQLite holds signed 64-bit integers at most, whatever is declared."""
        limit = _declared_limit(declared) if column_max is None else column_max
        if _server_of(conn) == "sqlite":
            limit = min(limit, SIGNED_BIGINT_MAX)
        if self.token > min(limit, UNSIGNED_BIGINT_MAX):
            raise TokenOutOfRange(self.token, limit)

    def verdict(self, found: Optional[Sequence[Any]]) -> int:
        """What an UPDATE that changed no row meant, from the probe's row:
        no row matches (`LookupError`), a newer holder wrote (`StaleToken`),
        or the rows already held these values with this token (MySQL counts
        changed rows, not matched ones): then the rows matched."""
        if found is None or not found[0] or found[1] is None:
            raise LookupError(f"no row of {self.table} matches {self.where}")
        highest = int(found[1])
        if not _admits(highest, self.token, self.reentrant):
            raise StaleToken(self.token, highest)
        return int(found[0])


def sql_update(
    conn: Any,
    table: str,
    values: Mapping[str, Any],
    where: Mapping[str, Any],
    token: int,
    *,
    fence_column: str = "fence",
    reentrant: bool = True,
    column_max: Optional[int] = None,
    paramstyle: Optional[str] = None,
) -> int:
    """Updates the rows of `table` matching `where` (column = value, ANDed)
    with `values`, only if their fence column is below `token` (or equal,
    when `reentrant`), and sets the fence to `token`: one statement, so the
    check and the write are atomic.

    `conn` is any DB-API 2 connection (psycopg 3, psycopg2, PyMySQL,
    mysqlclient, sqlite3...): the statement goes through a cursor in the
    parameter style its driver declares (`paramstyle_of`), or `paramstyle`
    if given.

    A token the fence column cannot hold raises `TokenOutOfRange` before
    anything is written. Every 64-bit column holds tokens up to
    `SIGNED_BIGINT_MAX`; for a larger one the limit is `column_max` if
    given (`UNSIGNED_BIGINT_MAX` for `numeric(20)` or `BIGINT UNSIGNED`),
    else the column's declared type as the catalog tells it (PostgreSQL,
    MySQL/MariaDB drivers), else `SIGNED_BIGINT_MAX` (SQLite's `INTEGER`).

    Returns the rows updated; raises `StaleToken` when a matching row has a
    newer fence, `LookupError` when no row matches `where`. The caller
    commits."""
    style = paramstyle or paramstyle_of(conn)
    st = _Statements(style, table, values, where, token, fence_column, reentrant)
    cursor = conn.cursor()
    try:
        query, declared = st.column_query(conn, column_max), None
        if query is not None:
            cursor.execute(*query)
            declared = cursor.fetchone()
        st.check_range(conn, column_max, declared)
        cursor.execute(st.update, st.update_params)
        if cursor.rowcount > 0:
            return int(cursor.rowcount)
        cursor.execute(st.probe, st.probe_params)
        return st.verdict(cursor.fetchone())
    finally:
        cursor.close()


async def sql_update_async(
    conn: Any,
    table: str,
    values: Mapping[str, Any],
    where: Mapping[str, Any],
    token: int,
    *,
    fence_column: str = "fence",
    reentrant: bool = True,
    column_max: Optional[int] = None,
    paramstyle: Optional[str] = None,
) -> int:
    """`sql_update` for asyncio: an asyncpg connection (`$1` placeholders,
    `execute` and `fetchrow` on the connection), or an async DB-API style
    connection whose `cursor()` is an async context manager (psycopg 3's
    `AsyncConnection`), in its driver's parameter style."""
    style = paramstyle or paramstyle_of(conn)
    st = _Statements(style, table, values, where, token, fence_column, reentrant)
    query = st.column_query(conn, column_max)
    if style == "dollar":
        declared = None if query is None else await conn.fetchrow(query[0], *query[1])
        st.check_range(conn, column_max, declared)
        status = await conn.execute(st.update, *st.update_params)
        tail = str(status).rsplit(" ", 1)[-1]  # "UPDATE 1"
        updated = int(tail) if tail.isdigit() else 0
        if updated > 0:
            return updated
        return st.verdict(await conn.fetchrow(st.probe, *st.probe_params))
    async with conn.cursor() as cursor:
        declared = None
        if query is not None:
            await cursor.execute(*query)
            declared = await cursor.fetchone()
        st.check_range(conn, column_max, declared)
        await cursor.execute(st.update, st.update_params)
        if cursor.rowcount > 0:
            return int(cursor.rowcount)
        await cursor.execute(st.probe, st.probe_params)
        return st.verdict(await cursor.fetchone())


# Files and directories.


class _Flock:
    """An exclusive `flock` on `path` (created if missing), across processes."""

    def __init__(self, path: str) -> None:
        if fcntl is None:  # pragma: no cover
            raise OSError("file fencing needs fcntl (POSIX)")
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)

    def __enter__(self) -> "_Flock":
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: Any) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)


def _atomic_write(path: str, data: bytes) -> None:
    """Writes a temp file beside `path`, fsyncs it and renames it over `path`."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".fence-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_fence(fence_path: str) -> int:
    """The token a fence file records, 0 when there is none yet."""
    try:
        with open(fence_path, "rb") as f:
            text = f.read(32).strip()
    except FileNotFoundError:
        return 0
    return int(text) if text.isdigit() else 0


def write_file(path: str, data: bytes, token: int, *, reentrant: bool = True) -> None:
    """Replaces `path` with `data` if `token` is not older than the fence
    file `path + ".fence"`. Under an exclusive lock on `path + ".lock"`, the
    fence is raised first, then the data replaced (both atomically by
    rename): a crash in between leaves the fence ahead, which still refuses
    every older holder. Raises `StaleToken`."""
    fence_path = path + ".fence"
    with _Flock(path + ".lock"):
        highest = read_fence(fence_path)
        if not _admits(highest, token, reentrant):
            raise StaleToken(token, highest)
        if token != highest:
            _atomic_write(fence_path, f"{token}\n".encode())
        _atomic_write(path, data)


def publish_dir(
    link: str, build: Callable[[str], None], token: int, *, reentrant: bool = True
) -> str:
    """Publishes a directory at `link`, a symlink to `link + ".<token>"`:
    `build(path)` fills a fresh directory, then, under an exclusive lock,
    the token in the current target's name is compared and the link swapped
    atomically (rename of a new symlink). The replaced directory is left
    for the caller to remove. Returns the new directory's path. Raises
    `StaleToken` (the built directory is then removed)."""
    target = f"{link}.{token}"
    building = tempfile.mkdtemp(prefix=".build-", dir=os.path.dirname(os.path.abspath(link)))
    try:
        build(building)
        with _Flock(link + ".lock"):
            highest = _dir_token(link)
            if not _admits(highest, token, reentrant):
                raise StaleToken(token, highest)
            if os.path.lexists(target):
                _remove_tree(target)
            os.rename(building, target)
            tmp_link = f"{link}.link-{token}"
            if os.path.lexists(tmp_link):
                os.unlink(tmp_link)
            os.symlink(os.path.basename(target), tmp_link)
            os.replace(tmp_link, link)
        return target
    finally:
        if os.path.exists(building):
            _remove_tree(building)


def _dir_token(link: str) -> int:
    try:
        current = os.readlink(link)
    except (FileNotFoundError, OSError):
        return 0
    suffix = current.rsplit(".", 1)[-1]
    return int(suffix) if suffix.isdigit() else 0


def _remove_tree(path: str) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


# S3-style object stores.


class PreconditionFailed(Exception):
    """What a conditional store raises when If-Match does not hold."""


def conditional_put(
    store: Any,
    key: str,
    data: bytes,
    token: int,
    *,
    reentrant: bool = True,
    attempts: int = 5,
) -> str:
    """Writes `data` to `key` of an S3-style store only if `token` is not
    older than the `fence` recorded in the object's metadata. `store` has
    `head(key) -> Optional[(version, metadata)]` and `put(key, data,
    metadata, if_match=version or None, if_none_match=bool)` raising
    `PreconditionFailed` (for S3: ETag, `Metadata`, `IfMatch`,
    `IfNoneMatch="*"`). A precondition that fails (another writer in
    between) is read again, at most `attempts` times. Returns the new
    version."""
    for _ in range(max(1, attempts)):
        head: Optional[Tuple[str, Mapping[str, str]]] = store.head(key)
        highest = 0
        if head is not None:
            text = str(head[1].get("fence", "0"))
            highest = int(text) if text.isdigit() else 0
        if not _admits(highest, token, reentrant):
            raise StaleToken(token, highest)
        try:
            if head is None:
                return str(store.put(key, data, {"fence": str(token)}, if_match=None, if_none_match=True))
            return str(store.put(key, data, {"fence": str(token)}, if_match=head[0], if_none_match=False))
        except PreconditionFailed:
            continue
    raise Error(f"{key}: the object kept changing under the write ({attempts} attempts)")


__all__ = [
    "Fence",
    "PreconditionFailed",
    "SIGNED_BIGINT_MAX",
    "StaleToken",
    "TokenOutOfRange",
    "UNSIGNED_BIGINT_MAX",
    "conditional_put",
    "paramstyle_of",
    "publish_dir",
    "read_fence",
    "sql_update",
    "sql_update_async",
    "write_file",
]
