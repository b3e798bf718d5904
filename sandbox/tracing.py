"""A job's own spans (docs/tracing.md).  A tracing supervisor puts its attempt's span
context in the start message (`"trace": {"traceparent", "tracestate"}`); the handler runs
with it current, so the spans it makes, and those of the instrumented libraries it calls,
are the attempt's children.  They are not exported from here: the child sends them,
finished, to the supervisor as one `spans` message at the end of its run, and the
supervisor exports them with its own.  So a job needs no network (the strict sandbox has
none) and its environment holds no exporter endpoint or credentials.

Nothing of OpenTelemetry is imported here unless the job is traced: the fork server of a
tracing supervisor preloads it (`preload`, before it forks, so that no child imports it),
and a traced job in a child of another imports it then (`sandbox/otel_child.py`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

from sandbox import protocol
from sandbox.channel import ControlChannel

T = TypeVar("T")


def preload() -> None:
    """Import the SDK and make its tracer provider this process's (the fork server's, so
    that every child it forks has it); ImportError without the SDK."""
    from sandbox import otel_child

    otel_child.install()


def run_traced(start: protocol.Start, channel: ControlChannel, call: Callable[..., T],
               *args: Any) -> T:
    """`call(*args)`, with the attempt's span current if the start message carries one,
    then its finished spans sent on `channel` (also when it raises)."""
    carried = start.trace
    if not isinstance(carried, dict):
        return call(*args)
    if "sandbox.otel_child" not in sys.modules:
        try:
            preload()
        except ImportError:  # the SDK is not installed for this interpreter: untraced
            return call(*args)
    from sandbox import otel_child

    return otel_child.run(carried, channel, call, *args)
