"""Tells a client made before `fork()` from one used after it: the child
shares the parent's sockets (and, for asyncio, its selector), so it must
neither use them nor close them, and must be told to make its own client."""

from __future__ import annotations

import os

_generation = 0


def _forked() -> None:
    global _generation
    _generation += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def generation() -> int:
    """Bumped in every child process made by `fork()`."""
    return _generation
