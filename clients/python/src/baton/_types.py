"""The values the client returns: a key's state (`inspect`) and a node's
status (`status`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional

from .errors import Error


@dataclass(frozen=True)
class KeyState:
    """One key as the serving node sees it (`Q <key>`)."""

    key: str
    #: The live grant's fencing token, None while the key is free.
    token: Optional[int]
    #: Seconds left on the live grant's lease (3 decimals), None while free.
    lease_left: Optional[float]
    #: Acquires queued for the key.
    waiters: int

    @property
    def held(self) -> bool:
        """Whether the key has a live grant."""
        return self.token is not None


@dataclass(frozen=True)
class Status:
    """A node's `S` answer. `fields` has every field, including any added
    after this client was written."""

    role: str
    mode: str
    self_addr: Optional[str]
    active: Optional[str]
    token: int
    locks: int
    waiters: int
    fields: Dict[str, str] = field(default_factory=dict)

    @staticmethod
    def from_fields(fields: Dict[str, str]) -> "Status":
        def number(name: str) -> int:
            value = fields.get(name, "0")
            return int(value) if value.isdigit() else 0

        def addr(name: str) -> Optional[str]:
            value = fields.get(name)
            return None if value in (None, "-") else value

        return Status(
            role=fields.get("role", ""),
            mode=fields.get("mode", ""),
            self_addr=addr("self"),
            active=addr("active"),
            token=number("token"),
            locks=number("locks"),
            waiters=number("waiters"),
            fields=dict(fields),
        )


@dataclass(frozen=True)
class NodeStatus:
    """What one registered address said about itself, or why it could not
    be asked: exactly one of `status` and `error` is set."""

    addr: str
    status: Optional[Status]
    error: Optional[Error]

    @property
    def ok(self) -> bool:
        return self.status is not None
