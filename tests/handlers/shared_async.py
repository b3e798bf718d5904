"""Async handlers for shared children (child_concurrency > 1): each proves when its job
was alive in a ledger (`key token token monotonic`: an execution is its token, as jobs of
one child share a pid), and shows the child's pid in its result."""

import asyncio
import logging
import os
import time


async def _ledger_lines(job, seconds: float) -> None:
    ledger = job.payload["ledger"]
    end = time.monotonic() + seconds
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        while True:
            now = time.monotonic()
            os.write(fd, f"{job.key} {job.token} {job.token} {now:.6f}\n".encode())
            if now >= end:
                return
            await asyncio.sleep(0.02)
    finally:
        os.close(fd)


async def ledger(job):
    """Alive for payload["seconds"], in the ledger; with payload["stubborn"], it catches
    every cancellation and goes on."""
    seconds = float(job.payload.get("seconds", 1.0))
    end = time.monotonic() + seconds
    while True:
        try:
            await _ledger_lines(job, max(0.0, end - time.monotonic()))
            break
        except asyncio.CancelledError:
            if not job.payload.get("stubborn"):
                raise
    return {"pid": os.getpid(), "token": job.token, "attempt": job.attempt}


async def sleeper(job):
    """Sleeps payload["seconds"], printing and logging its key every 50 ms; returns the
    child's pid. With payload["notes"], returns the first note it gets (None if none)."""
    if job.payload.get("notes"):
        note = await job.next_notification(timeout=float(job.payload.get("seconds", 1.0)))
        return {"note": note, "pid": os.getpid(), "attempt": job.attempt}
    end = time.monotonic() + float(job.payload.get("seconds", 1.0))
    count = 0
    while time.monotonic() < end:
        count += 1
        print(f"line {count} of {job.key}")
        logging.getLogger("shared").warning("logged by %s", job.key)
        await asyncio.sleep(0.05)
    return {"pid": os.getpid(), "attempt": job.attempt, "stop_reason": job.stop_reason}


async def stubborn(job):
    """Never ends: each cancellation is caught."""
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            print(f"{job.key} ignores its stop ({job.stop_reason})")


async def hog(job):
    """Takes payload["mib"] MiB in one step, then waits."""
    block = bytearray(int(job.payload["mib"]) << 20)
    for index in range(0, len(block), 4096):
        block[index] = 1
    await asyncio.sleep(30)
    return len(block)


async def waits_in_a_named_place(job):
    await asyncio.sleep(3600)
