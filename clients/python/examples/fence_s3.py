"""Fencing an object in an S3-style store with a conditional write.

    python fence_s3.py [host:port ...]

The object's metadata records the token that wrote it (`fence`). A write
reads the object's version (ETag) and fence, refuses a token older than
the fence, and writes with `If-Match: <version>` (`If-None-Match: *` for a
new object), so a writer that slipped in between makes the precondition
fail and the check is made again. With boto3 the store's two calls are
`head_object` (ETag, Metadata) and `put_object(..., Metadata={"fence":
token}, IfMatch=etag)`; here a small in-memory store plays S3.
"""

import itertools
import sys
import threading

import baton
from baton.fence import PreconditionFailed, StaleToken, conditional_put


class MemoryStore:
    """Objects with a version and metadata; `put` honours If-Match and If-None-Match."""

    def __init__(self):
        self.objects = {}
        self.versions = itertools.count(1)
        self.mutex = threading.Lock()

    def head(self, key):
        with self.mutex:
            obj = self.objects.get(key)
            return None if obj is None else (obj[0], dict(obj[2]))

    def get(self, key):
        with self.mutex:
            return self.objects[key][1]

    def put(self, key, data, metadata, if_match=None, if_none_match=False):
        with self.mutex:
            current = self.objects.get(key)
            if if_none_match and current is not None:
                raise PreconditionFailed(key)
            if if_match is not None and (current is None or current[0] != if_match):
                raise PreconditionFailed(key)
            version = f'"v{next(self.versions)}"'
            self.objects[key] = (version, bytes(data), dict(metadata))
            return version


def main(servers):
    store = MemoryStore()
    with baton.Client(servers) as client:
        with client.lock("exports/latest", wait=5, lease=30) as lock:
            conditional_put(store, "exports/latest.csv", b"a,b\n1,2\n", lock.token)
        old = lock.token
        with client.lock("exports/latest", wait=5, lease=30) as newer:
            conditional_put(store, "exports/latest.csv", b"a,b\n3,4\n", newer.token)
    try:
        conditional_put(store, "exports/latest.csv", b"stale\n", old)
        raise SystemExit("a stale token was admitted")
    except StaleToken as err:
        print("refused:", err)
    print(store.get("exports/latest.csv"), store.head("exports/latest.csv"))


if __name__ == "__main__":
    main(sys.argv[1:] or ["127.0.0.1:7411"])
