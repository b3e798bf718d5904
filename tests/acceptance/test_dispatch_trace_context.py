"""A dispatch keeps the caller's W3C trace context with its job (docs/tracing.md): the
current span's in a program that uses OpenTelemetry (Client, AsyncClient, dispatch_many),
TRACEPARENT's for `poolsup dispatch`; and a program that never imported OpenTelemetry
does not import it by dispatching."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from supervisor.store import opened_store
from tests.helpers.pool import write_pool

HANDLER = "traced"
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture(params=["redis", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "redis":
        return str(request.getfixturevalue("redis_url"))
    return f"sqlite:///{tmp_path}/pool.db"


def run(program: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                            timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def claimed(store_url: str, pool: str, count: int) -> dict[str, tuple[str | None, str | None]]:
    async def claim() -> dict[str, tuple[str | None, str | None]]:
        async with opened_store(store_url, pool) as store:
            batch = await store.claim("sup-a", [HANDLER], count, 30.0, 3)
        return {job.key: (job.traceparent, job.tracestate) for job in batch.jobs}
    return anyio.run(claim)


PROGRAM = """
import asyncio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from supervisor import Client
from supervisor.client import AsyncClient
trace.set_tracer_provider(TracerProvider())
tracer = trace.get_tracer("test")
client = Client({url!r}, pool={pool!r})
client.dispatch("before", handler="traced")
with tracer.start_as_current_span("request") as span:
    client.dispatch("one", handler="traced")
    client.dispatch_many([{{"key": "many", "handler": "traced"}}])
    async def main():
        async with AsyncClient({url!r}, pool={pool!r}) as aclient:
            await aclient.dispatch("async", handler="traced")
    asyncio.run(main())
    context = span.get_span_context()
    print(f"00-{{context.trace_id:032x}}-{{context.span_id:016x}}-{{context.trace_flags:02x}}")
client.close()
"""


def test_a_dispatch_keeps_the_current_spans_context_and_none_without_a_span(
    store_url: str, pool_name: str,
) -> None:
    expected = run(PROGRAM.format(url=store_url, pool=pool_name)).strip()

    contexts = claimed(store_url, pool_name, 4)

    assert contexts == {"before": (None, None), "one": (expected, None),
                        "many": (expected, None), "async": (expected, None)}


def test_a_program_without_opentelemetry_imports_none_of_it_to_dispatch(
    store_url: str, pool_name: str,
) -> None:
    out = run(
        "import sys\n"
        "from supervisor import Client\n"
        f"with Client({store_url!r}, pool={pool_name!r}) as client:\n"
        "    before = set(sys.modules)\n"
        "    client.dispatch('plain', handler='traced')\n"
        "print(sorted(name for name in sys.modules if name.startswith('opentelemetry')\n"
        "             and name not in before))\n")

    # (redis-py 8, which supervisor imports, imports the API and the SDK's metrics itself
    # when they are installed: docs/tracing.md)
    assert out.strip() == "[]"
    assert claimed(store_url, pool_name, 1) == {"plain": (None, None)}


def test_poolsup_dispatch_keeps_traceparent_from_its_environment(
    store_url: str, pool_name: str, tmp_path: Path,
) -> None:
    config = write_pool(tmp_path, store=store_url, pool=pool_name,
                        handlers={HANDLER: {"path": "outcomes.py", "function": "echo"}})
    env = {**os.environ, "TRACEPARENT": PARENT, "TRACESTATE": "vendor=x"}
    for args in (["k1"], ["--from-file", "-"]):
        result = subprocess.run(
            [sys.executable, "-m", "supervisor.cli", "dispatch", "-c", str(config), *args],
            input='{"key": "k2"}\n', capture_output=True, text=True, timeout=60, env=env)
        assert result.returncode == 0, result.stderr
    env["TRACEPARENT"] = "not a traceparent"
    result = subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "dispatch", "-c", str(config), "k3"],
        capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr

    assert claimed(store_url, pool_name, 3) == {
        "k1": (PARENT, "vendor=x"), "k2": (PARENT, "vendor=x"), "k3": (None, None)}
