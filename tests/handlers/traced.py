"""Handlers that make spans of their own (docs/tracing.md) and show what of the exporter's
settings their process sees."""

import os
import time

from opentelemetry import trace

tracer = trace.get_tracer("tests.traced")


def traced(job):
    with tracer.start_as_current_span("handler work") as span:
        span.set_attribute("job.key", job.key)
        with tracer.start_as_current_span("inner call"):
            pass
    return {"otel_environ": sorted(name for name in os.environ if name.startswith("OTEL_")),
            "pid": os.getpid()}


def traced_fails(job):
    with tracer.start_as_current_span("before failing"):
        pass
    raise ValueError("traced failure\nsecond line")


def traced_sleeps(job):
    with tracer.start_as_current_span("sleeping"):
        time.sleep(float(job.payload.get("seconds", 60)))
    return "woke up"


async def traced_async(job):
    """In a shared child: its spans, made across awaits while its siblings make theirs."""
    import asyncio

    with tracer.start_as_current_span("handler work") as span:
        span.set_attribute("job.key", job.key)
        await asyncio.sleep(0.3)
        with tracer.start_as_current_span("inner call"):
            await asyncio.sleep(0.1)
    return {"pid": os.getpid()}
