"""The asyncio Baton client.

```python
async with baton.aio.Client(["127.0.0.1:7411"]) as client:
    async with client.lock("orders/42", wait=5, lease=30) as lock:
        await write(order, fence=lock.token)
    async for state in client.watch("orders/42"):
        print(state.holders)
```
"""

from __future__ import annotations

from ._client import Client
from ._election import Election, Observation
from ._lock import Lock, LockContext, OnLost
from ._watch import Watch

__all__ = ["Client", "Election", "Lock", "LockContext", "Observation", "OnLost", "Watch"]
