"""The errors a caller of the client can branch on, all under `baton.Error`.

They map to decisions: retry later (`TimedOut`, `NoServer`, `Unanswered`),
fix the request or the configuration (`Rejected`, `InvalidArgument`,
`AuthenticationFailed`, `PermissionDenied`, `TlsError`), or stop touching
the protected resource (`LeaseLost`, `NotHeld`).
"""

from __future__ import annotations

from typing import Optional


class Error(Exception):
    """Base class of every error the Baton client raises."""


class TimedOut(Error, TimeoutError):
    """The node answered `T`: the wait ran out before the lock was granted,
    and nothing was granted. (A wait that ran out while no node answered is
    `NoServer`.) Also a builtin `TimeoutError`."""

    def __init__(self, key: str) -> None:
        super().__init__(f"timed out waiting for {key}")
        self.key = key


class NoServer(Error):
    """No node served the request: none could be reached, none answered in
    time, or none was active before the wait ran out."""

    def __init__(self, message: str = "no server reachable") -> None:
        super().__init__(message)


class Unanswered(NoServer):
    """A node took the request but did not answer in time (the protocol
    gives it 3 s, and an acquire its wait plus 3 s)."""

    def __init__(self, after: float) -> None:
        super().__init__(f"no answer from the node within {after:.3f} s")
        self.after = after


class NotHeld(Error):
    """A release found no live grant with that token (`N R`): the lock was
    already released or its lease expired."""

    def __init__(self, key: str, token: int) -> None:
        super().__init__(f"{key} is not held with token {token}")
        self.key = key
        self.token = token


class LeaseLost(Error):
    """The grant no longer exists (`N K` to a renewal, or the keep-alive could
    not renew before the lease ran out): another holder may own the lock."""

    def __init__(self, key: str, token: int) -> None:
        super().__init__(f"lease on {key} (token {token}) was lost")
        self.key = key
        self.token = token


class Rejected(Error):
    """A node answered `E`: the request is malformed or beyond a limit.
    `reason` is the node's words after `E <op> <key>`."""

    def __init__(self, reason: str, key: Optional[str] = None) -> None:
        super().__init__(f"rejected by the node: {reason}")
        self.reason = reason
        self.key = key


class Unsupported(Rejected):
    """The node speaks protocol 1.1: it does not know this request (`V`,
    `W`) or these acquire options (permits, shared, value). Nothing
    changed on the node; upgrade it to use them."""

    def __init__(self, reason: str, key: Optional[str] = None) -> None:
        Rejected.__init__(self, reason, key)
        Error.__init__(self, f"the node does not speak protocol 1.2: {reason}")


class NotLeader(Error):
    """`proclaim` on an election this client does not lead (it did not
    campaign, resigned, or lost its lease)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"not the leader of {name}")
        self.name = name


class AuthenticationFailed(Error):
    """The node refused the credentials (`E U <user> authentication failed`)."""

    def __init__(self) -> None:
        super().__init__("authentication failed: wrong user name or secret")


class AuthenticationNotEnabled(AuthenticationFailed):
    """Credentials were given, but the node has no users."""

    def __init__(self) -> None:
        Error.__init__(
            self, "authentication is not enabled on the node, yet credentials were given"
        )


class AuthenticationRequired(Error):
    """The node requires authentication and the client has no credentials."""

    def __init__(self) -> None:
        super().__init__("the node requires authentication: give a user and secret")


class PermissionDenied(Error):
    """The user may not use this key (`E <op> <key> permission denied`);
    nothing changed on the node."""

    def __init__(self, key: str) -> None:
        super().__init__(f"permission denied on {key}")
        self.key = key


class TlsError(Error):
    """TLS with a node failed: one side speaks TLS and the other does not, or
    a certificate does not verify. Retrying will not help."""

    def __init__(self, addr: str, why: str) -> None:
        super().__init__(f"TLS with {addr}: {why}")
        self.addr = addr
        self.why = why


class Closed(Error):
    """The client was closed: nothing was sent (or, for an acquire granted as
    the client closed, the grant was given back)."""

    def __init__(self) -> None:
        super().__init__("the client was closed")


class ForkedClient(Closed):
    """The client was made in a parent process, before `fork()`: its
    connections belong to the parent. Make a new client in the child."""

    def __init__(self) -> None:
        Error.__init__(
            self, "this baton client was made before fork(), in the parent process: "
            "make a new client in the child"
        )


class WrongEventLoop(Error, RuntimeError):
    """An asyncio client was used from an event loop other than the one it
    was connected on. Make one client per event loop."""

    def __init__(self) -> None:
        super().__init__(
            "this baton.aio.Client belongs to another event loop (the one it was "
            "connected on): make one client per event loop"
        )


class InvalidArgument(Error, ValueError):
    """A key, user name, secret, duration or address the protocol cannot
    carry; nothing was sent."""


class UnexpectedAnswer(Error):
    """A node answered something that does not fit the request."""


# Also reachable as attributes of `Error` (`baton.Error.TimedOut`).
for _cls in (
    TimedOut,
    NoServer,
    Unanswered,
    NotHeld,
    LeaseLost,
    Rejected,
    Unsupported,
    NotLeader,
    AuthenticationFailed,
    AuthenticationNotEnabled,
    AuthenticationRequired,
    PermissionDenied,
    TlsError,
    Closed,
    ForkedClient,
    WrongEventLoop,
    InvalidArgument,
    UnexpectedAnswer,
):
    setattr(Error, _cls.__name__, _cls)
del _cls
