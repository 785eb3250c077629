"""The asyncio Baton client.

```python
async with baton.aio.Client(["127.0.0.1:7411"]) as client:
    async with client.lock("orders/42", wait=5, lease=30) as lock:
        await write(order, fence=lock.token)
```
"""

from __future__ import annotations

from ._client import Client
from ._lock import Lock, LockContext, OnLost

__all__ = ["Client", "Lock", "LockContext", "OnLost"]
