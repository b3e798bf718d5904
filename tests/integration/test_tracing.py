"""Tracing (docs/tracing.md), end to end: real supervisors exporting to a real OTLP/HTTP
receiver, real children in the default and strict sandboxes, fresh and reused.  Each
attempt is a span `poolsup.run <handler>`, a child of the span current at the dispatch;
the handler's own spans are the attempt's children and reach the receiver through the
supervisor; and without OTEL_* variables nothing of OpenTelemetry is imported."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from tests.helpers.otlp_receiver import OtlpReceiver, ReceivedSpan, open_receiver
from tests.helpers.pool import finished, wait_for
from tests.integration.conftest import Pool

TRACE_ID = 0x5B8EFFF798038103D269B633813FC60C
DISPATCH_SPAN_ID = 0xEEE19B7EC3C1B174
TRACE_HEX, DISPATCH_HEX = f"{TRACE_ID:032x}", f"{DISPATCH_SPAN_ID:016x}"


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    yield from open_receiver()


@contextlib.contextmanager
def dispatching_span() -> Iterator[None]:
    """A span current in the test, as a traced web request's would be in its handler
    (the API alone: no SDK, no global provider in the test process)."""
    context = SpanContext(TRACE_ID, DISPATCH_SPAN_ID, is_remote=False,
                          trace_flags=TraceFlags(TraceFlags.SAMPLED))
    with trace.use_span(NonRecordingSpan(context)):
        yield


def handlers(profile: str, per_child: int) -> dict[str, dict[str, Any]]:
    common = {"path": "traced.py", "sandbox": profile, "max_jobs_per_child": per_child}
    return {"traced": {**common, "function": "traced"},
            "traced_fails": {**common, "function": "traced_fails", "max_attempts": 1}}


def attempt_of(key: str) -> Any:
    def found(spans: list[ReceivedSpan]) -> ReceivedSpan | None:
        return next((span for span in spans if span.name.startswith("poolsup.run ")
                     and span.attributes.get("poolsup.job.key") == key), None)
    return found


def named(spans: list[ReceivedSpan], name: str, parent: ReceivedSpan) -> ReceivedSpan | None:
    return next((span for span in spans
                 if span.name == name and span.parent_span_id == parent.span_id), None)


@pytest.mark.parametrize("per_child", [1, 2], ids=["fresh", "reused"])
@pytest.mark.parametrize("profile", ["default", "strict"])
def test_an_attempt_is_a_span_of_the_dispatch_with_the_handlers_spans_below_it(
    pool: Pool, receiver: OtlpReceiver, profile: str, per_child: int,
) -> None:
    config = pool.config(handlers(profile, per_child), capacity=1)
    supervisor = pool.start(config, env=receiver.environment())
    client = pool.client()
    with dispatching_span():
        client.dispatch("first", {}, handler="traced")
        client.dispatch("second", {}, handler="traced")
        client.dispatch("broken", {}, handler="traced_fails")
    records = {key: wait_for(lambda key=key: finished(client, key), 30, message=key)
               for key in ("first", "second", "broken")}

    assert [records[key]["state"] for key in ("first", "second", "broken")] == [
        "succeeded", "succeeded", "failed"], pool.logs()
    for key in ("first", "second"):
        attempt = receiver.wait_for(attempt_of(key), message=f"the attempt span of {key}")
        assert (attempt.name, attempt.trace_id, attempt.parent_span_id) == (
            "poolsup.run traced", TRACE_HEX, DISPATCH_HEX)
        assert attempt.attributes == {
            "poolsup.job.key": key, "poolsup.job.handler": "traced",
            "poolsup.job.attempt": 1, "poolsup.job.token": records[key]["token"],
            "poolsup.supervisor": supervisor_id(pool), "poolsup.job.outcome": "succeeded"}
        assert (attempt.status, attempt.service_name) == ("ok", "poolsup-test")
        work = receiver.wait_for(lambda spans, a=attempt: named(spans, "handler work", a),
                                 message=f"the handler's span of {key}")
        assert (work.trace_id, work.attributes, work.scope) == (
            TRACE_HEX, {"job.key": key}, "tests.traced")
        assert receiver.wait_for(lambda spans, w=work: named(spans, "inner call", w))
        # The job's process saw nothing of the exporter's settings.
        assert records[key]["result"]["otel_environ"] == []
    if per_child == 2 and records["first"]["result"]["pid"] != records["second"]["result"]["pid"]:
        # Not reused: a child retires for a reason it says (under load, a reader thread
        # slow to end), never silently.
        assert "is not reused: " in pool.logs(), pool.logs()

    failed = receiver.wait_for(attempt_of("broken"), message="the failed attempt's span")
    assert (failed.parent_span_id, failed.status, failed.status_message) == (
        DISPATCH_HEX, "error", "ValueError: traced failure")
    assert failed.attributes["poolsup.job.outcome"] == "failed"
    assert receiver.wait_for(lambda spans: named(spans, "before failing", failed))
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait() == 0


def supervisor_id(pool: Pool) -> str:
    return str(pool.client().status()["supervisors"][0]["id"])


def test_a_job_dispatched_without_a_span_is_a_trace_of_its_own(
    pool: Pool, receiver: OtlpReceiver,
) -> None:
    pool.start(pool.config(handlers("default", 1)), env=receiver.environment())
    client = pool.client()
    client.dispatch("untraced", {}, handler="traced")
    wait_for(lambda: finished(client, "untraced"), 30)

    attempt = receiver.wait_for(attempt_of("untraced"))
    assert attempt.parent_span_id == ""
    assert receiver.wait_for(lambda spans: named(spans, "handler work", attempt))


def test_a_drain_ends_the_attempts_span_and_shows_in_it(
    pool: Pool, receiver: OtlpReceiver,
) -> None:
    config = pool.config({"sleeper": {"path": "traced.py", "function": "traced_sleeps"}},
                         stop_grace=5, drain_timeout=1)
    supervisor = pool.start(config, env=receiver.environment())
    client = pool.client()
    with dispatching_span():
        client.dispatch("sleepy", {"seconds": 60}, handler="sleeper")
    wait_for(lambda: client.job("sleepy")["state"] == "running", 20)
    wait_for(lambda: "started" in supervisor.log() or client.job("sleepy")["pid"], 20)

    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait() == 0

    attempt = receiver.wait_for(attempt_of("sleepy"), message="the drained attempt's span")
    assert attempt.parent_span_id == DISPATCH_HEX
    assert attempt.attributes["poolsup.job.outcome"] == "released"
    assert attempt.attributes["poolsup.job.stop_reason"] == "drain"
    assert [name for name, _ in attempt.events] == ["poolsup.drained"]
    assert client.job("sleepy")["state"] == "pending"


MODULES_AT_EXIT = """
import atexit, sys
import redis  # redis-py 8 imports parts of OpenTelemetry itself when it is installed
before = set(sys.modules)
def dump():
    with open({out!r}, "w") as file:
        file.write(repr(sorted(m for m in sys.modules
                               if m.startswith("opentelemetry") and m not in before)))
atexit.register(dump)
from supervisor.cli.main import main
sys.argv = ["poolsup", "run", "-c", {config!r}]
main()
"""


def test_without_otel_variables_nothing_of_opentelemetry_is_imported(
    pool: Pool, tmp_path: Path,
) -> None:
    config = pool.config({"modules": {"path": "otel_modules.py", "function": "otel_modules"}})
    out = tmp_path / "modules.txt"
    env = {name: value for name, value in __import__("os").environ.items()
           if not name.startswith("OTEL_")}
    log = (tmp_path / "supervisor.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-c", MODULES_AT_EXIT.format(out=str(out), config=str(config))],
        stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        client = pool.client()
        client.dispatch("look", {}, handler="modules")
        record = wait_for(lambda: finished(client, "look"), 30)
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
        log.close()

    assert record["result"] == []  # the job's child
    assert orjson.loads(out.read_text().replace("'", '"')) == []  # the supervisor


def test_a_collector_that_does_not_answer_delays_the_exit_by_seconds_at_most(
    pool: Pool, tmp_path: Path,
) -> None:
    closed_port = "http://127.0.0.1:9"  # discard: refused, so the exporter retries
    supervisor = pool.start(pool.config(handlers("default", 1)), env={
        "OTEL_EXPORTER_OTLP_ENDPOINT": closed_port, "OTEL_EXPORTER_OTLP_TIMEOUT": "30",
        "OTEL_BSP_SCHEDULE_DELAY": "60000"})
    client = pool.client()
    client.dispatch("queued", {}, handler="traced")
    wait_for(lambda: finished(client, "queued"), 30)
    assert "tracing jobs to otlp (http://127.0.0.1:9)" in supervisor.log()

    began = time.monotonic()
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(60) == 0
    assert time.monotonic() - began < 10, supervisor.log()
    assert "the last spans were not exported within 3 s" in supervisor.log()


def test_an_attempt_the_sampler_drops_sends_nothing_of_its_handler_either(
    pool: Pool, receiver: OtlpReceiver,
) -> None:
    supervisor = pool.start(pool.config(handlers("default", 1)),
                            env={**receiver.environment(), "OTEL_TRACES_SAMPLER": "always_off"})
    client = pool.client()
    with dispatching_span():
        client.dispatch("dropped", {}, handler="traced")
    assert wait_for(lambda: finished(client, "dropped"), 30)["state"] == "succeeded"
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait() == 0  # the exporters are flushed before it exits

    assert receiver.spans() == []


def test_each_job_of_a_shared_child_sends_its_own_spans(
    pool: Pool, receiver: OtlpReceiver,
) -> None:
    handlers = {"traced": {"path": "traced.py", "function": "traced_async",
                           "child_concurrency": 4}}
    pool.start(pool.config(handlers, capacity=4), env=receiver.environment())
    client = pool.client()
    keys = ["shared-1", "shared-2", "shared-3"]
    with dispatching_span():
        for key in keys:
            client.dispatch(key, {}, handler="traced")
    records = {key: wait_for(lambda key=key: finished(client, key), 30, message=key)
               for key in keys}

    assert len({record["result"]["pid"] for record in records.values()}) == 1, records
    for key in keys:
        attempt = receiver.wait_for(attempt_of(key), message=f"the attempt span of {key}")
        work = receiver.wait_for(lambda spans, a=attempt: named(spans, "handler work", a),
                                 message=f"the handler's span of {key}")
        assert work.attributes == {"job.key": key}  # its own, not a sibling's
        assert receiver.wait_for(lambda spans, w=work: named(spans, "inner call", w))
    works = [span for span in receiver.spans() if span.name == "handler work"]
    assert len(works) == len(keys), works
