"""Watches every job process the ledger names, from its start line until /proc shows it
gone: when it was last seen existing and when first seen gone (`ProcessFate`)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from tests.chaos.ledger import LedgerTail, ProcessFate, now

POLL_INTERVAL = 0.1


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks, or None if it is gone or a zombie (a
    zombie runs nothing: it counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


class ProcessMonitor:
    def __init__(self, ledger: Path) -> None:
        self.tail = LedgerTail(ledger)
        self._births: dict[int, int | None] = {}
        self._last_alive: dict[int, float] = {}
        self._dead_at: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="process-monitor", daemon=True)

    def start(self) -> ProcessMonitor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(POLL_INTERVAL):
            self.poll()

    def poll(self) -> None:
        self.tail.poll()
        for pid in self.tail.started - self._dead_at.keys():
            # Stamped before the look: it existed then, since its start line came earlier.
            looked_at = now()
            birth = start_time(pid)
            if pid not in self._births:
                self._births[pid] = birth
            if birth is not None and birth == self._births[pid]:
                self._last_alive[pid] = looked_at
            else:
                self._dead_at[pid] = now()

    def fates(self) -> dict[int, ProcessFate]:
        return {pid: ProcessFate(pid, self._last_alive.get(pid), self._dead_at.get(pid))
                for pid in self.tail.started}

    def alive(self) -> list[int]:
        return sorted(self.tail.started - self._dead_at.keys())


def job_processes_by_environment(prefix: str) -> list[str]:
    """Processes whose environment names a job key starting with `prefix`.  (A forked
    child's /proc environ is the one it was exec'd with, so this finds only job
    processes that exec'd; the monitor's pids cover the others.)"""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        for variable in environ.split(b"\0"):
            if variable.startswith(b"POOLSUP_JOB_KEY=" + prefix.encode()):
                found.append(f"pid {entry} {variable.decode(errors='replace')}")
    return found
