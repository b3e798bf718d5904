"""A real OTLP/HTTP trace receiver for tests (no collector binary can be installed on
these machines, but the wire format can be received for real): an http.server that takes
`POST /v1/traces`, gunzips a gzip body, and decodes the `ExportTraceServiceRequest`
protobuf an exporter sends, keeping every span."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

STATUS_NAMES = {0: "unset", 1: "ok", 2: "error"}


@dataclass(frozen=True)
class ReceivedSpan:
    trace_id: str  # hex, as W3C writes them
    span_id: str
    parent_span_id: str  # "" for a root span
    name: str
    attributes: dict[str, Any]
    status: str  # unset, ok, error
    status_message: str
    events: tuple[tuple[str, dict[str, Any]], ...]
    service_name: str
    scope: str


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    return None if kind is None else getattr(value, kind)


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


class OtlpReceiver:
    """Listening on 127.0.0.1 at `endpoint` until closed."""

    def __init__(self) -> None:
        self._spans: list[ReceivedSpan] = []
        self._lock = threading.Lock()
        self.requests = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                receiver._take(ExportTraceServiceRequest.FromString(body))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def environment(self) -> dict[str, str]:
        """A supervisor's environment that sends its traces here, quickly."""
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_SERVICE_NAME": "poolsup-test",
                "OTEL_BSP_SCHEDULE_DELAY": "100"}

    def _take(self, request: ExportTraceServiceRequest) -> None:
        found = []
        for resource_spans in request.resource_spans:
            service = _attributes(resource_spans.resource.attributes).get("service.name", "")
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(ReceivedSpan(
                        trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(), name=span.name,
                        attributes=_attributes(span.attributes),
                        status=STATUS_NAMES.get(span.status.code, str(span.status.code)),
                        status_message=span.status.message,
                        events=tuple((event.name, _attributes(event.attributes))
                                     for event in span.events),
                        service_name=str(service), scope=scope_spans.scope.name))
        with self._lock:
            self.requests += 1
            self._spans.extend(found)

    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def wait_for(self, predicate: Callable[[list[ReceivedSpan]], Any], timeout: float = 20.0,
                 message: str = "spans") -> Any:
        deadline = time.monotonic() + timeout
        while True:
            spans = self.spans()
            if found := predicate(spans):
                return found
            if time.monotonic() > deadline:
                names = sorted({span.name for span in spans})
                raise AssertionError(f"timed out after {timeout} s waiting for {message}; "
                                     f"received {len(spans)} span(s): {names}")
            time.sleep(0.05)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def open_receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    try:
        yield receiver
    finally:
        receiver.close()
