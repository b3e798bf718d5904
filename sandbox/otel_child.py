"""The OpenTelemetry side of a traced job's child (sandbox/tracing.py): a tracer provider
that keeps the spans finished in this process, and the `spans` message that carries them
to the supervisor.  Imported only for traced jobs.

The message: {"t": "spans", "spans": [SPAN, ...], "dropped": N}, each SPAN
{"name", "trace_id" (32 hex), "span_id" (16 hex), "flags", "parent_id" (16 hex or null),
 "parent_remote", "kind", "start", "end" (ns since the epoch), "attributes",
 "events": [{"name", "time", "attributes"}], "links": [{"trace_id", "span_id",
 "attributes"}], "status": [code, description], "scope": [name, version]};
at most MAX_SPANS spans and MAX_MESSAGE bytes, the rest counted in "dropped".
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import orjson
from opentelemetry import context, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from sandbox import protocol
from sandbox.channel import ControlChannel

T = TypeVar("T")

MAX_SPANS = 1000
MAX_MESSAGE = 512 * 1024


class _Kept(SpanProcessor):
    """The spans finished since the job started, up to MAX_SPANS."""

    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []
        self.dropped = 0

    def on_end(self, span: ReadableSpan) -> None:
        if len(self.spans) < MAX_SPANS:
            self.spans.append(span)
        else:
            self.dropped += 1

    def take(self) -> tuple[list[ReadableSpan], int]:
        spans, dropped = self.spans, self.dropped
        self.spans, self.dropped = [], 0
        return spans, dropped

    def take_below(self, root: int) -> list[ReadableSpan]:
        """The spans below the span `root` (a job's attempt), the others kept: one job's of
        a shared child, whose siblings' spans, maybe of the same trace, finish into the
        same process."""
        below, taken = {root}, []
        grew = True
        while grew:
            grew = False
            for span in self.spans:
                own = span.get_span_context()
                if (own is not None and span.parent is not None
                        and span.parent.span_id in below and own.span_id not in below):
                    below.add(own.span_id)
                    taken.append(span)
                    grew = True
        self.spans = [span for span in self.spans if span not in taken]
        return taken


class _Provider(TracerProvider):
    """The SDK's provider, but for what it does in every forked child: it detects the
    process's resource anew (entry points and a thread pool, some 4 ms a fork).  The
    spans made here take the supervisor's resource when it exports them, so a fork only
    needs the provider's lock anew."""

    def _handle_fork(self) -> None:
        self._tracers_lock = threading.Lock()


_kept = _Kept()
_propagator = TraceContextTextMapPropagator()


def install() -> None:
    """This process's tracer provider: the parent's sampling decision is the job's (the
    supervisor sampled the attempt), and nothing is exported from here."""
    provider = _Provider(sampler=ParentBased(ALWAYS_ON), resource=Resource.get_empty(),
                         shutdown_on_exit=False)
    provider.add_span_processor(_kept)
    trace.set_tracer_provider(provider)


def run(carried: dict[str, Any], channel: ControlChannel, call: Callable[..., T],
        *args: Any) -> T:
    carrier = {name: value for name, value in carried.items() if isinstance(value, str)}
    token = context.attach(_propagator.extract(carrier))
    _kept.take()  # a reused child's earlier spans, if a job left any unsent
    try:
        return call(*args)
    finally:
        context.detach(token)
        spans, dropped = _kept.take()
        if spans or dropped:
            with contextlib.suppress(OSError):
                channel.send_raw_line(spans_line(spans, dropped))


def job_context(carried: dict[str, Any]) -> tuple[context.Context, int]:
    """A job's span context, to make current in its task (a shared child's), and the id
    of its attempt's span, under which its own spans are made."""
    carrier = {name: value for name, value in carried.items() if isinstance(value, str)}
    extracted = _propagator.extract(carrier)
    return extracted, trace.get_current_span(extracted).get_span_context().span_id


def attach(extracted: context.Context) -> None:
    """Make `extracted` current in the running context (a job's task's copy)."""
    context.attach(extracted)


def job_spans_line(attempt_span: int) -> bytes | None:
    """The `spans` message of one job of a shared child: the spans finished here below
    its attempt's span."""
    spans = _kept.take_below(attempt_span)
    return spans_line(spans, 0) if spans else None


def spans_line(spans: list[ReadableSpan], dropped: int) -> bytes:
    encoded = [_encoded(span, own) for span in spans if (own := span.get_span_context())]
    while True:
        line = orjson.dumps({"t": protocol.MSG_SPANS, "spans": encoded, "dropped": dropped},
                            default=repr) + b"\n"
        if len(line) <= MAX_MESSAGE or not encoded:
            return line
        kept = len(encoded) // 2
        dropped += len(encoded) - kept
        encoded = encoded[:kept]


def _encoded(span: ReadableSpan, own: trace.SpanContext) -> dict[str, Any]:
    parent = span.parent
    scope = span.instrumentation_scope
    return {
        "name": span.name,
        "trace_id": f"{own.trace_id:032x}",
        "span_id": f"{own.span_id:016x}",
        "flags": int(own.trace_flags),
        "parent_id": None if parent is None else f"{parent.span_id:016x}",
        "parent_remote": bool(parent is not None and parent.is_remote),
        "kind": span.kind.value,
        "start": span.start_time,
        "end": span.end_time,
        "attributes": dict(span.attributes or {}),
        "events": [{"name": event.name, "time": event.timestamp,
                    "attributes": dict(event.attributes or {})} for event in span.events],
        "links": [{"trace_id": f"{link.context.trace_id:032x}",
                   "span_id": f"{link.context.span_id:016x}",
                   "attributes": dict(link.attributes or {})} for link in span.links],
        "status": [span.status.status_code.value, span.status.description],
        "scope": [scope.name, scope.version] if scope is not None else ["", None],
    }
