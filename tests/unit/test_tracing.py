"""Tracing's decisions and the attempt's span (observe/tracing.py, observe/otel.py), over an
in-memory exporter: when tracing is on, what a stop and each outcome show in the span, and
that a child's spans are read as sandbox/otel_child.py writes them and nothing else."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from sandbox import otel_child, protocol
from supervisor.core.outcome import (
    Abandon,
    Complete,
    Fail,
    Release,
    Snooze,
    Stopped,
    StopReason,
)
from supervisor.job.channel import ControlReader
from supervisor.observe.otel import AttemptSpan, Tracing
from supervisor.observe.tracing import open_tracing, tracing_wanted

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.mark.parametrize(("environ", "wanted"), [
    ({}, False),
    ({"OTEL_SERVICE_NAME": "api", "OTEL_EXPORTER_OTLP_HEADERS": "x=1"}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
    ({"OTEL_TRACES_EXPORTER": "console"}, True),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
    ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, False),
    ({"OTEL_SDK_DISABLED": "false", "OTEL_TRACES_EXPORTER": "otlp"}, True),
])
def test_tracing_is_on_when_the_environment_configures_a_trace_exporter(
    environ: dict[str, str], wanted: bool,
) -> None:
    assert tracing_wanted(environ) is wanted


@pytest.fixture
def exported() -> Iterator[tuple[Tracing, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource({"service.name": "sup"}),
                              shutdown_on_exit=False)
    processor = SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    yield Tracing(provider, [processor], "sup-a", "memory"), exporter
    provider.shutdown()


def attempt(tracing: Tracing, traceparent: str | None = PARENT) -> AttemptSpan:
    return tracing.attempt(key="k", handler="h", attempt=2, token=7,
                           traceparent=traceparent, tracestate=None)


def only(exporter: InMemorySpanExporter) -> ReadableSpan:
    (span,) = exporter.get_finished_spans()
    return span


@pytest.mark.parametrize(("outcome", "kind", "code", "description"), [
    (Complete(b"1"), "succeeded", StatusCode.OK, None),
    (Fail("ValueError: no\n\ntraceback", final=False), "failed", StatusCode.ERROR,
     "ValueError: no"),
    (Release("drain"), "released", StatusCode.UNSET, None),
    (Snooze(30.0), "snoozed", StatusCode.UNSET, None),
    (Stopped("stopped by request"), "stopped", StatusCode.UNSET, None),
    (Abandon("lease lost while running"), "abandoned", StatusCode.ERROR,
     "lease lost while running"),
    (None, "unknown", StatusCode.ERROR, "supervising the job failed"),
])
def test_the_outcome_is_the_spans_status(
    exported: tuple[Tracing, InMemorySpanExporter], outcome: Any, kind: str,
    code: StatusCode, description: str | None,
) -> None:
    tracing, exporter = exported
    span = attempt(tracing)
    span.end(outcome)
    span.end(Complete(b"2"))  # once ended, it stays as it ended

    found = only(exporter)
    assert found.name == "poolsup.run h"
    assert found.attributes is not None and found.attributes["poolsup.job.outcome"] == kind
    assert (found.status.status_code, found.status.description) == (code, description)
    assert found.parent is not None and found.parent.span_id == 0xB7AD6B7169203331


def test_a_lease_loss_and_a_move_show_in_the_span(
    exported: tuple[Tracing, InMemorySpanExporter],
) -> None:
    tracing, exporter = exported
    attempt(tracing).end(Abandon("lease lost while running"), StopReason.LEASE_LOST)
    attempt(tracing).end(Release("rebalance"), StopReason.REBALANCE, "sup-b")

    lost, moved = exporter.get_finished_spans()
    assert [(event.name, dict(event.attributes or {})) for event in lost.events] == [
        ("poolsup.lease_lost", {})]
    assert [(event.name, dict(event.attributes or {})) for event in moved.events] == [
        ("poolsup.moved", {"poolsup.move.target": "sup-b"})]
    assert moved.attributes is not None
    assert moved.attributes["poolsup.job.stop_reason"] == "rebalance"


def test_a_childs_spans_are_exported_as_the_child_made_them(
    exported: tuple[Tracing, InMemorySpanExporter],
) -> None:
    tracing, exporter = exported
    child_provider = TracerProvider(shutdown_on_exit=False)
    kept = InMemorySpanExporter()
    child_provider.add_span_processor(SimpleSpanProcessor(kept))
    with child_provider.get_tracer("lib", "1.2").start_as_current_span(
            "query", attributes={"db.rows": 3, "tags": ["a", "b"]}) as made:
        made.add_event("retry", {"n": 1})
        made.set_status(StatusCode.ERROR, "timeout")
    message = protocol.decode_message(
        otel_child.spans_line(list(kept.get_finished_spans()), 2).rstrip(b"\n"))
    assert isinstance(message, protocol.Spans)

    span = attempt(tracing)
    span.take_child_spans(message)
    span.end(Complete(b"1"))

    child, own = exporter.get_finished_spans()
    original = kept.get_finished_spans()[0]
    assert (child.name, child.context, child.start_time, child.end_time) == (
        "query", original.context, original.start_time, original.end_time)
    assert dict(child.attributes or {}) == {"db.rows": 3, "tags": ("a", "b")}
    assert [(e.name, dict(e.attributes or {})) for e in child.events] == [("retry", {"n": 1})]
    assert (child.status.status_code, child.status.description) == (StatusCode.ERROR, "timeout")
    assert child.instrumentation_scope is not None
    assert (child.instrumentation_scope.name, child.instrumentation_scope.version) == (
        "lib", "1.2")
    assert child.resource.attributes["service.name"] == "sup"
    assert own.attributes is not None and own.attributes["poolsup.job.spans_dropped"] == 2


def test_what_is_not_a_span_as_a_child_writes_them_is_dropped(
    exported: tuple[Tracing, InMemorySpanExporter],
) -> None:
    tracing, exporter = exported
    read = tracing.export_child_spans(protocol.Spans(spans=[
        "text", {}, {"name": "x", "trace_id": "zz"},
        {"name": "ok", "trace_id": "0af7651916cd43dd8448eb211c80319c",
         "span_id": "b7ad6b7169203331", "flags": 1, "kind": 0, "start": 1, "end": 2,
         "status": [0, None], "scope": ["s", None],
         "attributes": {"good": 1, "nested": {"a": 1}, "mixed": [1, "a"]}}]))

    assert read == 1
    assert dict(only(exporter).attributes or {}) == {"good": 1}


def test_the_control_reader_hands_a_spans_message_on_and_keeps_the_result() -> None:
    taken: list[protocol.Spans] = []
    reader = ControlReader(max_result=1000,
                           on_ack=lambda seq: None, on_checkpoint=lambda value: None,
                           on_spans=taken.append)
    reader.feed(b'{"t":"spans","spans":[],"dropped":0}\n'
                b'{"t":"result","stopping":false,"value":5}\n')

    assert taken == [protocol.Spans(spans=[], dropped=0)]
    assert reader.result_json == b"5"


def test_a_childs_message_is_bounded_and_counts_what_it_leaves_out() -> None:
    provider = TracerProvider(shutdown_on_exit=False)
    kept = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(kept))
    tracer = provider.get_tracer("lib")
    for index in range(200):
        with tracer.start_as_current_span(f"s{index}", attributes={"blob": "x" * 4000}):
            pass

    line = otel_child.spans_line(list(kept.get_finished_spans()), 5)

    message = orjson.loads(line)
    assert len(line) <= otel_child.MAX_MESSAGE
    assert 0 < len(message["spans"]) < 200
    assert message["dropped"] == 5 + 200 - len(message["spans"])


def test_an_exporter_that_is_not_installed_leaves_the_supervisor_untraced(
    caplog: pytest.LogCaptureFixture,
) -> None:
    for environ in ({"OTEL_TRACES_EXPORTER": "nosuch"},
                    {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317",
                     "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}):
        assert open_tracing(environ, "sup-a") is None
    assert "no trace exporter 'nosuch' is installed" in caplog.text
    assert "no trace exporter 'otlp_proto_grpc' is installed" in caplog.text


def test_the_otlp_exporter_over_http_is_the_default() -> None:
    tracing = open_tracing({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, "sup-a")
    assert tracing is not None
    try:
        assert tracing.destination == "otlp (http://c:4318)"
    finally:
        assert tracing.shutdown(1.0)
