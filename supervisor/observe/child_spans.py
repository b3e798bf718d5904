"""The spans a traced job's child made, as its `spans` message carries them
(sandbox/otel_child.py writes them), read back into the SDK's spans for the supervisor's
exporters.  A child is not trusted: a span that is not as the child writes them is
dropped, and only the attributes an exporter can encode are kept."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags


def child_span(item: object, resource: Resource) -> ReadableSpan | None:
    """One span of the message, with `resource` (the supervisor's), or None."""
    if not isinstance(item, dict):
        return None
    try:
        trace_id = int(item["trace_id"], 16)
        flags = TraceFlags(int(item["flags"]) & 0xFF)
        parent_id = item.get("parent_id")
        parent = None if parent_id is None else SpanContext(
            trace_id, int(parent_id, 16), is_remote=bool(item.get("parent_remote")),
            trace_flags=flags)
        code, description = item["status"]
        scope_name, scope_version = item["scope"]
        return ReadableSpan(
            name=str(item["name"]),
            context=SpanContext(trace_id, int(item["span_id"], 16), is_remote=False,
                                trace_flags=flags),
            parent=parent,
            resource=resource,
            attributes=_attributes(item.get("attributes")),
            events=[Event(str(event["name"]), _attributes(event.get("attributes")),
                          int(event["time"])) for event in item.get("events", ())],
            links=[Link(SpanContext(int(link["trace_id"], 16), int(link["span_id"], 16),
                                    is_remote=True),
                        _attributes(link.get("attributes"))) for link in item.get("links", ())],
            kind=SpanKind(int(item["kind"])),
            status=Status(StatusCode(int(code)),
                          None if description is None else str(description)),
            start_time=int(item["start"]),
            end_time=int(item["end"]),
            instrumentation_scope=InstrumentationScope(
                str(scope_name), None if scope_version is None else str(scope_version)),
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


_SCALARS = (str, bool, int, float)


def _attributes(value: object) -> dict[str, Any]:
    """The attributes an exporter can encode: scalars and lists of one kind of scalar."""
    if not isinstance(value, dict):
        return {}
    kept: dict[str, Any] = {}
    for name, item in value.items():
        if isinstance(item, _SCALARS):
            kept[str(name)] = item
        elif isinstance(item, list) and item and all(isinstance(v, type(item[0])) for v in item) \
                and isinstance(item[0], _SCALARS):
            kept[str(name)] = tuple(item)
    return kept
