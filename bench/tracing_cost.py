"""What tracing costs per job (docs/tracing.md): the supervisor's CPU (all its threads,
the exporter's included) and the fork server's with its children's, per no-op job, with
tracing off and on (exporting to a real OTLP/HTTP receiver in this process), side by side
in one run, rounds alternating.

    python3 bench/tracing_cost.py [--jobs 500] [--rounds 2] [--store redis|sqlite]
                                  [--max-jobs-per-child 1]

Each round dispatches the jobs, starts a supervisor (capacity 2), takes the CPU times once
it serves and again 1 s after the last job succeeded (the exporter sends a batch every
200 ms here, so the spans are sent by then; the idle second is in both modes), and stops it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import psutil
from common import HANDLERS, redis_server

from supervisor import Client
from tests.helpers.otlp_receiver import OtlpReceiver
from tests.helpers.pool import SupervisorProcess, fork_server_of, write_pool

SETTLE = 1.0


def cpu(process: psutil.Process, *, reaped: bool = False) -> float:
    times = process.cpu_times()
    total = times.user + times.system
    return total + (times.children_user + times.children_system if reaped else 0.0)


def one_round(store: str, handler: dict[str, object], jobs: int, env: dict[str, str],
              directory: Path) -> tuple[float, float, float]:
    """(supervisor ms, fork server and children ms) per job, and jobs per second."""
    pool = f"bench-{uuid.uuid4().hex[:8]}"
    config = write_pool(directory, store=store, pool=pool, name=f"{pool}.toml",
                        handlers={"h": handler}, capacity=2, lease_ttl=10)
    with Client(store, pool=pool) as client:
        client.dispatch_many([{"key": f"j{index}", "handler": "h"} for index in range(jobs)])
        process = SupervisorProcess(config, directory / f"{pool}.log").start(env)
        try:
            process.wait_serving()
            supervisor = psutil.Process(process.pid)
            fork_server = fork_server_of(process)
            start = (cpu(supervisor), cpu(fork_server, reaped=True), time.monotonic())
            while client.status()["counts"].get("succeeded", 0) < jobs:
                time.sleep(0.02)
            elapsed = time.monotonic() - start[2]
            time.sleep(SETTLE)
            end = (cpu(supervisor), cpu(fork_server, reaped=True))
        finally:
            process.signal(15)
            process.wait(60)
    return ((end[0] - start[0]) * 1000 / jobs, (end[1] - start[1]) * 1000 / jobs,
            jobs / elapsed)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--store", choices=["redis", "sqlite"], default="redis")
    parser.add_argument("--max-jobs-per-child", type=int, default=1)
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="poolsup-tracing-"))
    receiver = OtlpReceiver()
    base_env = {name: value for name, value in os.environ.items()
                if not name.startswith("OTEL_")}
    traced_env = {**base_env, **receiver.environment(), "OTEL_BSP_SCHEDULE_DELAY": "200"}
    per_child = {"max_jobs_per_child": args.max_jobs_per_child, "timeout": 0}
    modes = {
        "off": ({"path": str(HANDLERS / "noop.py"), "function": "run", **per_child},
                base_env),
        "on": ({"path": str(HANDLERS / "noop.py"), "function": "run", **per_child},
               traced_env),
        "on, handler makes 1 span": (
            {"path": str(HANDLERS / "traced.py"), "function": "one_span", **per_child},
            traced_env),
    }
    results: dict[str, list[tuple[float, float, float]]] = {mode: [] for mode in modes}
    with redis_server() as redis_url:
        for round_number in range(args.rounds):
            for mode, (handler, env) in modes.items():
                store = (redis_url if args.store == "redis"
                         else f"sqlite:///{directory}/pool-{round_number}-{len(results[mode])}.db")
                results[mode].append(one_round(store, handler, args.jobs, env, directory))
    spans = receiver.spans()
    receiver.close()
    print(f"store={args.store} jobs={args.jobs} rounds={args.rounds} capacity=2 "
          f"max_jobs_per_child={args.max_jobs_per_child} "
          f"(cpus {os.cpu_count()}, python {sys.version.split()[0]})")
    print(f"{'tracing':26} {'supervisor ms/job':>18} {'fork server+children ms/job':>28} "
          f"{'jobs/s':>8}")
    for mode, rows in results.items():
        sup, children, rate = (statistics.median(column) for column in zip(*rows, strict=True))
        print(f"{mode:26} {sup:18.3f} {children:28.3f} {rate:8.0f}   rounds: "
              + ", ".join(f"{row[0]:.2f}/{row[1]:.2f}" for row in rows))
    attempts = sum(span.name.startswith("poolsup.run") for span in spans)
    print(f"received {len(spans)} spans, {attempts} of them attempts "
          f"(expected {2 * args.jobs * args.rounds})")
    span_only, encoded = span_work()
    print(f"in this process, CPU per attempt span: {span_only:.0f} us to start, hand to the "
          f"child and end it; {encoded:.0f} us with its OTLP encoding in batches of 512")


def span_work(attempts: int = 5120) -> tuple[float, float]:
    """The supervisor's own work per attempt span, without processes or network: CPU
    microseconds per span, and with the OTLP protobuf encoding the exporter does."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        SimpleSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    from supervisor.core.outcome import Complete
    from supervisor.observe.otel import Tracing

    class Batches(SpanExporter):
        def __init__(self, encode: bool) -> None:
            self.encode = encode
            self.held: list[ReadableSpan] = []

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            self.held.extend(spans)
            if self.encode and len(self.held) >= 512:
                encode_spans(self.held).SerializeToString()
                self.held = []
            return SpanExportResult.SUCCESS

    results = []
    for encode in (False, True):
        provider = TracerProvider(shutdown_on_exit=False)
        processor = SimpleSpanProcessor(Batches(encode))
        provider.add_span_processor(processor)
        tracing = Tracing(provider, [processor], "sup", "bench")
        began = time.process_time()
        for index in range(attempts):
            span = tracing.attempt(
                key=f"k{index}", handler="h", attempt=1, token=index, tracestate=None,
                traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
            span.child_context()
            span.end(Complete(b"null"))
        results.append((time.process_time() - began) / attempts * 1e6)
    return results[0], results[1]


if __name__ == "__main__":
    main()
