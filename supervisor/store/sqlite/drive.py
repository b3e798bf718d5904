"""Driving a coroutine that never suspends to its end, without an event loop.

The SQL rules (store/sql/) are `async def`, written once for both engines.  SQLite runs
each transaction in a worker thread, over a `Tx` whose `async` methods call sqlite3 and
return without ever awaiting anything that suspends; so the thread can run the rule's
coroutine by hand: one `send(None)` runs it to its end, which is `StopIteration` with
the rule's value (or the rule's exception, raised out of `send`).  A coroutine that
suspends instead (it awaited something of an event loop) is a bug: it is closed, and
`Suspended` raised, rather than left half done inside a transaction.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

_T = TypeVar("_T")


class Suspended(RuntimeError):
    """A rule run in SQLite's worker thread awaited something that suspends."""


def run_to_end(coroutine: Coroutine[Any, Any, _T]) -> _T:
    """The value of `coroutine`, run here to its end; `Suspended` if it suspends."""
    try:
        yielded = coroutine.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coroutine.close()
    name = getattr(coroutine, "__qualname__", coroutine)
    raise Suspended(f"{name} suspended (it yielded {yielded!r}): a SQLite transaction's "
                    "steps must not await an event loop")
