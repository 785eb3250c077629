"""Throwaway PostgreSQL and MariaDB servers for the fencing tests: each in a
temp directory, on a free loopback port, from Debian's packages
(`postgresql`, `mariadb-server`), killed at the end of the session.

A missing server binary skips the tests that need it, with the package to
install; under CI (`CI=true`) it fails them instead, so that a CI run never
passes without having tested against the real servers.
"""

from __future__ import annotations

import glob
import importlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from typing import Any, Callable, List, Optional

import pytest

# How long a server gets to start answering: generous, the CI machine is shared.
START_BOUND = 60.0


def missing(what: str, package: str) -> None:
    """Skips, or fails under CI, for a server that is not installed."""
    skip_or_fail(f"{what} not found: apt-get install {package} (.ci/run does)")


def skip_or_fail(message: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message)
    pytest.skip(message)


def driver(module: str, reason: str = "") -> Any:
    """The driver `module`; skips, or fails under CI, when it is missing
    (requirements-test.txt installs every one)."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        skip_or_fail(f"{reason or module + ' is not installed'}: {err}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def run(cmd: List[str], what: str, user: Optional[str] = None) -> None:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, user=user)
    if out.returncode != 0:
        pytest.fail(f"{what} failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")


class Server:
    """One server process and its directory; `stop` kills both."""

    def __init__(self, proc: subprocess.Popen, port: int, root: str, log: str) -> None:
        self.proc, self.port, self.root, self.log = proc, port, root, log

    def wait_ready(self, ready: Callable[[], bool]) -> None:
        end = time.monotonic() + START_BOUND
        while not ready():
            if self.proc.poll() is not None or time.monotonic() > end:
                self.stop()
                with open(self.log) as f:
                    pytest.fail(f"the database server did not start:\n{f.read()[-3000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        shutil.rmtree(self.root, ignore_errors=True)


def postgres_bin(name: str) -> Optional[str]:
    """`name` from the newest /usr/lib/postgresql/*/bin, else from PATH."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4]))
    return found[-1] if found else shutil.which(name)


def start_postgres() -> Server:
    """A PostgreSQL server (user `postgres`, trust authentication). As root,
    it runs as the `postgres` user, since PostgreSQL refuses root."""
    initdb, postgres = postgres_bin("initdb"), postgres_bin("postgres")
    if not initdb or not postgres:
        missing("PostgreSQL (initdb, postgres)", "postgresql")
    assert initdb and postgres
    user = "postgres" if os.geteuid() == 0 else None
    root = tempfile.mkdtemp(prefix="baton-pg-")
    if user:
        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    data = os.path.join(root, "data")
    run([initdb, "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"],
        "initdb", user)
    port = free_port()
    log = os.path.join(root, "postgres.log")
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [postgres, "-D", data, "-k", root, "-p", str(port), "-c", "listen_addresses=127.0.0.1",
             "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, user=user,
        )
    server = Server(proc, port, root, log)
    server.wait_ready(lambda: answers(port) and "ready to accept" in open(log).read())
    return server


def start_mariadb() -> Server:
    """A MariaDB server; `root` without a password on 127.0.0.1."""
    mariadbd = shutil.which("mariadbd", path="/usr/sbin:/usr/bin:" + os.environ.get("PATH", ""))
    install = shutil.which("mariadb-install-db")
    if not mariadbd or not install:
        missing("MariaDB (mariadbd, mariadb-install-db)", "mariadb-server")
    assert mariadbd and install
    # As root, mariadbd must be told to stay root (its files are root's).
    as_root = ["--user=root"] if os.geteuid() == 0 else []
    root = tempfile.mkdtemp(prefix="baton-mariadb-")
    data = os.path.join(root, "data")
    run([install, "--no-defaults", f"--datadir={data}", *as_root, "--skip-test-db",
         "--auth-root-authentication-method=normal"], "mariadb-install-db")
    port = free_port()
    log = os.path.join(root, "mariadb.log")
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [mariadbd, "--no-defaults", f"--datadir={data}", f"--socket={root}/sock",
             f"--port={port}", "--bind-address=127.0.0.1", *as_root, "--skip-log-bin",
             "--skip-name-resolve", "--innodb-buffer-pool-size=16M", f"--pid-file={root}/pid"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out,
        )
    server = Server(proc, port, root, log)
    server.wait_ready(lambda: answers(port) and "ready for connections" in open(log).read())
    return server
