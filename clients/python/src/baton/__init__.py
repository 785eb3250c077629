"""Baton's Python client: locks with fencing tokens from a Baton cluster.

```python
import baton

client = baton.Client(["127.0.0.1:7411", "127.0.0.1:7412"])
with client.lock("orders/42", wait=5, lease=30) as lock:   # keep-alive on
    write(order, fence=lock.token)
client.close()
```

Protocol 1.2 adds semaphores (`permits=`), shared locks (`shared=True`),
holder values (`value=`, `Lock.set_value`), watches (`client.watch(key)`,
an iterator of `KeyState`) and elections (`client.election(name)`).

`baton.aio.Client` is the same for asyncio. Both keep one persistent
connection per address (two for a single address), pipeline requests
round-robin over the usable ones, redial broken connections every 3 s in
the background, probe a connection that goes silent and treat a node that
stops answering as down, follow `M` redirects, fail an acquire over with
what is left of its wait, and retry releases for 5 s every 200 ms.
"""

from __future__ import annotations

import logging

from . import aio, fence
from ._sync import Client, Lock, LockContext
from ._sync_watch import Election, Steps, Watch
from ._types import Holder, KeyState, Leader, Mode, NodeStatus, Status
from .errors import (
    AuthenticationFailed,
    AuthenticationNotEnabled,
    AuthenticationRequired,
    Closed,
    Error,
    ForkedClient,
    InvalidArgument,
    LeaseLost,
    NoServer,
    NotHeld,
    NotLeader,
    PermissionDenied,
    Rejected,
    TimedOut,
    TlsError,
    Unanswered,
    UnexpectedAnswer,
    Unsupported,
    WrongEventLoop,
)

# The application decides where the client's log lines go.
logging.getLogger("baton").addHandler(logging.NullHandler())

__version__ = "0.1.0"

__all__ = [
    "AuthenticationFailed",
    "AuthenticationNotEnabled",
    "AuthenticationRequired",
    "Client",
    "Closed",
    "Election",
    "Error",
    "ForkedClient",
    "Holder",
    "InvalidArgument",
    "KeyState",
    "Leader",
    "LeaseLost",
    "Lock",
    "LockContext",
    "Mode",
    "NoServer",
    "NodeStatus",
    "NotHeld",
    "NotLeader",
    "PermissionDenied",
    "Rejected",
    "Status",
    "Steps",
    "TimedOut",
    "TlsError",
    "Unanswered",
    "UnexpectedAnswer",
    "Unsupported",
    "Watch",
    "WrongEventLoop",
    "aio",
    "fence",
]
