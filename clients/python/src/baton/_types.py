"""The values the client returns: a key's state (`inspect`, `watch`), its
holders, an election's leader and a node's status (`status`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Literal, Optional, Tuple

from .errors import Error

Mode = Literal["exclusive", "shared"]


@dataclass(frozen=True)
class Holder:
    """One grant of a key: its fencing token, the seconds left on its lease
    and the value its holder attached (None when it has none)."""

    token: int
    lease_left: float
    #: UTF-8; bytes that are not appear as surrogate escapes
    #: (`value.encode("utf-8", "surrogateescape")` gives them back).
    value: Optional[str] = None


@dataclass(frozen=True)
class KeyState:
    """One key as the serving node sees it (`Q <key>`, or a `W` answer)."""

    key: str
    #: The newest live grant's fencing token, None while the key is free.
    token: Optional[int]
    #: Seconds left on that grant's lease (3 decimals), None while free.
    lease_left: Optional[float]
    #: Acquires queued for the key.
    waiters: int
    #: How many grants the key may have at once (a semaphore's permits).
    permits: int = 1
    #: `"shared"` while shared grants hold the key, else `"exclusive"`.
    mode: Mode = "exclusive"
    #: The holders, oldest first; at most 16 are listed (`holder_count`
    #: has them all).
    holders: Tuple[Holder, ...] = ()
    #: How many grants hold the key.
    holder_count: int = 0
    #: Names the set of holders and their values: equal tags, same holders.
    #: Opaque; `watch(key, seen=tag)` waits for a change from it.
    tag: str = "-"

    @property
    def held(self) -> bool:
        """Whether the key has a live grant."""
        return self.token is not None

    @property
    def values(self) -> Tuple[Optional[str], ...]:
        """The listed holders' values, oldest first."""
        return tuple(holder.value for holder in self.holders)


@dataclass(frozen=True)
class Leader:
    """An election's leader: the value it proclaimed (None if it gave none)
    and the fencing token of its grant (a new leader has a higher one)."""

    value: Optional[str]
    token: int


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
    #: The protocol the node speaks: `"1.2"`, or `"1.1"` for a node that
    #: does not say (it knows neither watches nor the acquire options).
    protocol: str = "1.1"

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
            protocol=fields.get("protocol", "1.1"),
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
