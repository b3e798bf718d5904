"""A tracing supervisor's OpenTelemetry SDK (observe/tracing.py decides when it is used):
its tracer provider and exporters as the standard variables configure them, a span per
attempt (`AttemptSpan`), and the export of the spans a job's child made and sent here
(observe/child_spans.py reads them).

The SDK reads what it reads itself: the sampler (`OTEL_TRACES_SAMPLER`, `_ARG`), the
resource (`OTEL_SERVICE_NAME`, default `poolsup` here; `OTEL_RESOURCE_ATTRIBUTES`), the
batch processor's `OTEL_BSP_*`, and each exporter its endpoint, headers, timeout,
compression and certificates.  `OTEL_TRACES_EXPORTER` is a comma list of exporter names,
`otlp` by default: OTLP over HTTP/protobuf unless `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` or
`OTEL_EXPORTER_OTLP_PROTOCOL` says `grpc` (then opentelemetry-exporter-otlp-proto-grpc
must be installed); other names are the SDK's `opentelemetry_traces_exporter` entry points
(`console`, `zipkin`, ...).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from importlib.metadata import entry_points
from typing import assert_never

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from sandbox import protocol
from supervisor.core.outcome import (
    Abandon,
    Complete,
    Fail,
    Outcome,
    Release,
    Snooze,
    Stopped,
    StopReason,
)
from supervisor.observe.child_spans import child_span

SCOPE = "poolsup"
DEFAULT_SERVICE_NAME = "poolsup"
_propagator = TraceContextTextMapPropagator()

# What a stop asked for shows as in the attempt's span (the attribute
# poolsup.job.stop_reason has the reason itself).
STOP_EVENTS = {
    StopReason.LEASE_LOST: "poolsup.lease_lost",
    StopReason.REBALANCE: "poolsup.moved",
    StopReason.DRAIN: "poolsup.drained",
    StopReason.USER: "poolsup.stop_requested",
    StopReason.TIMEOUT: "poolsup.timeout",
}


class Tracing:
    """One supervisor's tracer and exporters, for as long as it runs."""

    def __init__(self, provider: TracerProvider, processors: Sequence[SpanProcessor],
                 supervisor_id: str, destination: str) -> None:
        self._provider = provider
        self._processors = tuple(processors)
        self._tracer = provider.get_tracer(SCOPE)
        self._resource = provider.resource
        self.supervisor_id = supervisor_id
        self.destination = destination

    @classmethod
    def start(cls, environ: Mapping[str, str], supervisor_id: str) -> Tracing:
        resource = Resource.create()
        if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
            resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
        provider = TracerProvider(resource=resource, shutdown_on_exit=False)
        names = [name.strip() for name in
                 environ.get("OTEL_TRACES_EXPORTER", "otlp").lower().split(",") if name.strip()]
        processors = [BatchSpanProcessor(_exporter(name, environ)) for name in names]
        for processor in processors:
            provider.add_span_processor(processor)
        return cls(provider, processors, supervisor_id, _destination(names, environ))

    def attempt(self, *, key: str, handler: str, attempt: int, token: int,
                traceparent: str | None, tracestate: str | None) -> AttemptSpan:
        """The span of one attempt of a job, started now, a child of the span its
        dispatch kept (`traceparent`; a root span if it kept none)."""
        parent = None
        if traceparent:
            parent = _propagator.extract({"traceparent": traceparent,
                                          "tracestate": tracestate or ""})
        span = self._tracer.start_span(
            f"poolsup.run {handler}", context=parent, kind=SpanKind.CONSUMER,
            attributes={
                "poolsup.job.key": key,
                "poolsup.job.handler": handler,
                "poolsup.job.attempt": attempt,
                "poolsup.job.token": token,
                "poolsup.supervisor": self.supervisor_id,
            })
        return AttemptSpan(span, self)

    def export_child_spans(self, message: protocol.Spans) -> int:
        """Hand the spans of a child's `spans` message to the exporters; how many it
        held that could be read.  A child is not trusted: a span that is not as
        sandbox/otel_child.py writes them is dropped."""
        spans = message.spans
        if not isinstance(spans, list):
            return 0
        read = 0
        for item in spans:
            span = child_span(item, self._resource)
            if span is not None:
                read += 1
                for processor in self._processors:
                    processor.on_end(span)
        return read

    def shutdown(self, wait: float) -> bool:
        """Export what is still queued and stop, waiting at most `wait` seconds (it
        blocks): whether that ended in time.  An exporter whose collector does not answer
        retries for its whole timeout (10 s by default); its thread is then left to end
        with the process."""
        closing = threading.Thread(target=self._provider.shutdown, daemon=True,
                                   name="poolsup traces shutdown")
        closing.start()
        closing.join(wait)
        return not closing.is_alive()


class AttemptSpan:
    """The span of one attempt: started at its claim, ended once with its outcome."""

    def __init__(self, span: trace.Span, tracing: Tracing) -> None:
        self._span = span
        self._tracing = tracing
        self._ended = False

    def child_context(self) -> dict[str, str]:
        """The W3C context the child's handler runs in: this span's."""
        carrier: dict[str, str] = {}
        _propagator.inject(carrier, context=trace.set_span_in_context(self._span))
        return carrier

    def take_child_spans(self, message: protocol.Spans) -> None:
        self._tracing.export_child_spans(message)
        dropped = message.dropped
        if isinstance(dropped, int) and dropped > 0:
            self._span.set_attribute("poolsup.job.spans_dropped", dropped)

    def end(self, outcome: Outcome | None, stop_reason: StopReason | None = None,
            move_target: str | None = None) -> None:
        """Record the outcome (None: supervising the job failed) and what a stop asked
        for, and end the span; a second call changes nothing."""
        if self._ended:
            return
        self._ended = True
        span = self._span
        if stop_reason is not None:
            span.set_attribute("poolsup.job.stop_reason", stop_reason.value)
            event_attributes = {} if move_target is None else {"poolsup.move.target": move_target}
            span.add_event(STOP_EVENTS[stop_reason], event_attributes)
        kind, status = _outcome(outcome)
        span.set_attribute("poolsup.job.outcome", kind)
        if isinstance(outcome, Snooze):
            span.set_attribute("poolsup.job.snooze_seconds", outcome.delay)
        if status is not None:
            span.set_status(status)
        span.end()


def _outcome(outcome: Outcome | None) -> tuple[str, Status | None]:
    match outcome:
        case Complete():
            return "succeeded", Status(StatusCode.OK)
        case Fail(error):
            return "failed", Status(StatusCode.ERROR, _first_line(error))
        case Release():
            return "released", None
        case Snooze():
            return "snoozed", None
        case Stopped():
            return "stopped", None
        case Abandon(why):
            return "abandoned", Status(StatusCode.ERROR, _first_line(why))
        case None:
            return "unknown", Status(StatusCode.ERROR, "supervising the job failed")
    assert_never(outcome)  # mypy: every outcome has its case


def _first_line(text: str) -> str:
    return text.split("\n", 1)[0]


def _exporter(name: str, environ: Mapping[str, str]) -> SpanExporter:
    if name == "otlp":
        protocol = (environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                    or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf")
        name = "otlp_proto_grpc" if protocol.strip().lower() == "grpc" else "otlp_proto_http"
    found = entry_points(group="opentelemetry_traces_exporter", name=name)
    if not found:
        raise ValueError(f"no trace exporter {name!r} is installed (OTEL_TRACES_EXPORTER)")
    exporter: SpanExporter = next(iter(found)).load()()
    return exporter


def _destination(names: Sequence[str], environ: Mapping[str, str]) -> str:
    """What the start's log line says: the exporters and, for OTLP, the endpoint."""
    endpoint = (environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "the default endpoint")
    return ", ".join(f"{name} ({endpoint})" if name == "otlp" else name for name in names)
