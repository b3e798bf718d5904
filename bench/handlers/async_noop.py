"""Async handlers for bench/async_peers.py, run with child_concurrency > 1 (their jobs
share a child as asyncio tasks)."""

import asyncio


async def noop(job):
    return None


async def sleeper(job):
    """Holds its job for payload["seconds"] without using the CPU."""
    await asyncio.sleep(float(job.payload.get("seconds", 30)))
    return None
