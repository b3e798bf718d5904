"""Signal masks and handlers as plain integers, through `_signal`, the C module that
`signal` wraps. The `signal` wrappers turn every mask they return into a set of enum
members: about 0.2 ms for a full mask, paid several times between two jobs of a reused
child (`sandbox.reuse`); and `signal.signal` makes the old handler an enum member,
through a ValueError when it is a function. A fresh child pays for every object it
touches first (a copy-on-write page fault each): through these, its signal setup
touches some 40 pages fewer. Same calls, same errors, without that."""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any, cast

Handler = Callable[[int, FrameType | None], Any] | int | None
# `_signal` knows its own, not `signal`'s enum members.
SIG_DFL: int = _signal.SIG_DFL


def pthread_sigmask(how: int, mask: Iterable[int]) -> set[int]:
    return cast(set[int], _signal.pthread_sigmask(how, mask))


def getsignal(signum: int) -> Handler:
    return cast(Handler, _signal.getsignal(signum))


def set_handler(signum: int, handler: Handler) -> None:
    _signal.signal(signum, handler)


def sigpending() -> set[int]:
    return cast(set[int], _signal.sigpending())


def take_pending(signum: int) -> bool:
    """Take one `signum` if one is pending (it must be blocked), without waiting; whether
    one was. A real-time signal can be pending several times: one at a time."""
    return _signal.sigtimedwait([signum], 0) is not None
