"""Fencing a file and a directory.

    python fence_files.py [host:port ...]

A file: `baton.fence.write_file(path, data, token)` keeps the highest token
in `path + ".fence"`; under an exclusive flock it raises the fence first,
then replaces the data by an atomic rename. A directory:
`baton.fence.publish_dir(link, build, token)` builds a fresh directory
`link.<token>` and swaps the symlink `link` to it atomically, if no newer
token is published.
"""

import os
import sys
import tempfile

import baton
from baton.fence import StaleToken, publish_dir, write_file


def main(servers):
    with tempfile.TemporaryDirectory(prefix="baton-fence-") as root:
        fence_in(root, servers)


def fence_in(root, servers):
    report = os.path.join(root, "report.txt")
    site = os.path.join(root, "site")
    with baton.Client(servers) as client:
        with client.lock("reports/daily", wait=5, lease=30) as lock:
            write_file(report, b"first run\n", lock.token)

            def build(path):
                with open(os.path.join(path, "index.html"), "w") as f:
                    f.write(f"<p>built with token {lock.token}</p>\n")

            publish_dir(site, build, lock.token)
        old = lock.token
        with client.lock("reports/daily", wait=5, lease=30) as newer:
            write_file(report, b"second run\n", newer.token)
            publish_dir(site, lambda path: open(os.path.join(path, "index.html"), "w").close(), newer.token)
    for stale in (lambda: write_file(report, b"late\n", old), lambda: publish_dir(site, lambda p: None, old)):
        try:
            stale()
            raise SystemExit("a stale token was admitted")
        except StaleToken as err:
            print("refused:", err)
    print(open(report).read().strip(), "->", os.readlink(site))


if __name__ == "__main__":
    main(sys.argv[1:] or ["127.0.0.1:7411"])
