"""The caller's W3C trace context, which a dispatch keeps with its job (docs/tracing.md).

`current()` imports nothing of OpenTelemetry where no span can be current: a span can only
be current in a process that has imported `opentelemetry.trace` already, so a caller that
never did pays one look-up in `sys.modules`, and one without a current span (redis-py 8
imports the API when it is installed) one more call.  With a current span, it gets the
`traceparent` and `tracestate` that the API's configured propagator
(`opentelemetry.propagate.inject`) writes for it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

# version-trace_id-parent_id-flags (https://www.w3.org/TR/trace-context/#traceparent-header)
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")
# Propagators must pass on at least 512 characters of it; a longer one is dropped.
MAX_TRACESTATE = 512


@dataclass(frozen=True)
class TraceContext:
    traceparent: str
    tracestate: str | None = None


def checked(traceparent: str | None, tracestate: str | None = None) -> TraceContext | None:
    """The context if `traceparent` is a valid W3C header (tracestate kept when it is
    short enough to keep), else None."""
    if traceparent is None:
        return None
    traceparent = traceparent.strip().lower()
    found = _TRACEPARENT.fullmatch(traceparent)
    if found is None or traceparent.startswith("ff") or set(found[1]) == {"0"} \
            or set(found[2]) == {"0"}:
        return None
    state = (tracestate or "").strip()
    return TraceContext(traceparent, state if 0 < len(state) <= MAX_TRACESTATE else None)


# What `carried` hands over to another thread's task (the blocking Client's portal).
_carried: ContextVar[TraceContext | None] = ContextVar("poolsup_trace_context", default=None)


def current() -> TraceContext | None:
    """The context of the span current in this thread or task, if any."""
    if (handed := _carried.get()) is not None:
        return handed
    api = sys.modules.get("opentelemetry.trace")
    if api is None or not api.get_current_span().get_span_context().is_valid:
        return None
    from opentelemetry import propagate

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return checked(carrier.get("traceparent"), carrier.get("tracestate"))


def from_environ(environ: Mapping[str, str]) -> TraceContext | None:
    """The context given as `TRACEPARENT` (and `TRACESTATE`) in an environment, as a
    traced shell script or CI step passes it on to the commands it runs."""
    return checked(environ.get("TRACEPARENT"), environ.get("TRACESTATE"))


@contextmanager
def carried(trace: TraceContext | None) -> Iterator[None]:
    """`trace` as `current()` within, whatever is current: the context a caller's thread
    had, in the task that dispatches for it on another thread."""
    token = _carried.set(trace)
    try:
        yield
    finally:
        _carried.reset(token)
