"""Handlers of the chaos run (tests/chaos): every run writes its life to a ledger file,
one short JSON line per write (O_APPEND), stamped on CLOCK_BOOTTIME, which the driver and
its process monitor read on the same host.

Lines (`e` is the event): `start` (key, token, pid, attempt, kind, the checkpoint it
resumed from), `alive` every ALIVE_INTERVAL from a thread of its own (so a CPU-bound or
blocked handler still proves it lives), `note` (a notification taken), `save` (a
checkpoint saved), `end` (how the handler left: returned, raised, or the stop reason).
tests/chaos/ledger.py parses them; this file imports nothing from tests so that it loads
in any sandbox.
"""

import asyncio
import json
import os
import threading
import time

from sandbox import Fail

ALIVE_INTERVAL = 0.1


def now():
    return time.clock_gettime(time.CLOCK_BOOTTIME)


class Ledger:
    def __init__(self, job, kind, *, beat=True):
        self.job = job
        self.fd = os.open(job.payload["ledger"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.done = threading.Event()
        self.write("start", attempt=job.attempt, kind=kind, cp=job.checkpoint)
        self.thread = threading.Thread(target=self._beat, daemon=True)
        if beat:
            self.thread.start()

    def write(self, event, **fields):
        line = {"e": event, "k": self.job.key, "t": self.job.token, "p": os.getpid(),
                "at": now(), **fields}
        os.write(self.fd, (json.dumps(line, separators=(",", ":")) + "\n").encode())

    def _beat(self):
        while not self.done.wait(ALIVE_INTERVAL):
            self.write("alive")

    def end(self, why):
        self.done.set()
        if self.thread.ident is not None:
            self.thread.join()
        self.write("end", why=why)
        os.close(self.fd)


async def _beat_while(ledger):
    """A shared child's job proves it lives from its own task's loop: a task that no
    longer runs writes nothing, whatever its siblings do."""
    while True:
        await asyncio.sleep(ALIVE_INTERVAL)
        ledger.write("alive")


def _ledgered_async(kind, body):
    """`await body(job, ledger)` between a start and an end line, in a shared child
    (child_concurrency > 1): a stop cancels the task, which ends it as a stop."""

    async def run(job):
        ledger = Ledger(job, kind, beat=False)
        beat = asyncio.ensure_future(_beat_while(ledger))
        why = "raise"
        try:
            result = await body(job, ledger)
            why = f"stop:{job.stop_reason}" if job.stopping else "return"
            return result
        except asyncio.CancelledError:
            why = f"stop:{job.stop_reason}"
            raise
        finally:
            beat.cancel()
            ledger.end(why)

    run.__name__ = kind
    return run


async def _async_short(job, ledger):
    await asyncio.sleep(float(job.payload.get("seconds", 0.3)))
    return {"token": job.token}


async def _async_stoppable(job, ledger):
    """Waits for a user's stop (the driver sends it mid-run): its task is cancelled."""
    await job.wait_stop(float(job.payload.get("seconds", 120)))
    return {"stopped": job.stopping}


def _ledgered(kind, body):
    """Run `body(job, ledger)` between a start and an end line."""

    def run(job):
        ledger = Ledger(job, kind)
        why = "raise"
        try:
            result = body(job, ledger)
            why = f"stop:{job.stop_reason}" if job.stopping else "return"
            return result
        finally:
            ledger.end(why)

    run.__name__ = kind
    return run


def _short(job, ledger):
    time.sleep(float(job.payload.get("seconds", 0.3)))
    return {"token": job.token}


def _cpu(job, ledger):
    end = time.monotonic() + float(job.payload.get("seconds", 1.0))
    spins = 0
    while time.monotonic() < end:
        spins += 1
    return {"spins": spins}


def _failing(job, ledger):
    time.sleep(float(job.payload.get("seconds", 0.1)))
    raise RuntimeError(f"chaos failure on attempt {job.attempt}")


def _fail_for_good(job, ledger):
    time.sleep(float(job.payload.get("seconds", 0.1)))
    raise Fail("chaos: bad input, do not retry")


def _stoppable(job, ledger):
    """Waits for a user's stop (the driver sends it mid-run)."""
    job.wait_stop(float(job.payload.get("seconds", 120)))
    return {"stopped": job.stopping}


def _take_notes(job, ledger, last):
    while (note := job.next_notification(0)) is not None:
        ledger.write("note", n=note["n"])
        last = max(last, note["n"])
    return last


def _long(job, ledger):
    """Runs until stopped; takes numbered notes; checkpoints its progress and the last
    note it took, and resumes from them."""
    checkpoint = job.checkpoint or {}
    count = checkpoint.get("count", 0)
    last_note = checkpoint.get("note", 0)
    while not job.wait_stop(0.1):
        count += 1
        last_note = _take_notes(job, ledger, last_note)
        if count % 5 == 0:
            saved = {"count": count, "note": last_note}
            ledger.write("save", cp=saved)
            job.save_checkpoint(saved)
    # A note that reached the child before the stop is taken, not left behind.
    _take_notes(job, ledger, last_note)
    return {"count": count}


def _checkpointing(job, ledger):
    """Does `steps` steps of 0.1 s, saving each, resuming from the last saved one."""
    step = (job.checkpoint or {}).get("step", 0)
    while step < int(job.payload.get("steps", 20)):
        time.sleep(0.1)
        step += 1
        ledger.write("save", cp={"step": step})  # before: the store may keep it
        job.save_checkpoint({"step": step})
    return {"step": step}


short = _ledgered("short", _short)
cpu = _ledgered("cpu", _cpu)
failing = _ledgered("failing", _failing)
fail_for_good = _ledgered("fail_for_good", _fail_for_good)
stoppable = _ledgered("stoppable", _stoppable)
long_running = _ledgered("long", _long)
checkpointing = _ledgered("checkpointing", _checkpointing)
async_short = _ledgered_async("async", _async_short)
async_stoppable = _ledgered_async("async_stoppable", _async_stoppable)
