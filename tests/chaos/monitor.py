"""Watches every job process the ledger names, from its start line until it exits: when
it was last seen existing and when first seen gone (`ProcessFate`)."""

from __future__ import annotations

import os
import select
import threading
from pathlib import Path

from tests.chaos.ledger import LedgerTail, ProcessFate, now

POLL_INTERVAL = 0.05


class ProcessMonitor:
    """A pidfd per job process: it turns readable the moment the process exits, so
    `dead_at` is stamped within the thread's wake-up latency of the exit.  `last_alive`
    is stamped before each wait: a process not yet exited when the wait returns existed
    at that stamp (its start line was read before)."""

    def __init__(self, ledger: Path) -> None:
        self.tail = LedgerTail(ledger)
        self._pidfds: dict[int, int] = {}  # pid -> pidfd, while the process lives
        self._last_alive: dict[int, float] = {}
        self._dead_at: dict[int, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="process-monitor", daemon=True)

    def start(self) -> ProcessMonitor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.poll(POLL_INTERVAL)

    def poll(self, timeout: float = 0.0) -> None:
        with self._lock:
            self.tail.poll()
            for pid in self.tail.started - self._pidfds.keys() - self._dead_at.keys():
                try:
                    self._pidfds[pid] = os.pidfd_open(pid)
                except ProcessLookupError:
                    self._dead_at[pid] = now()
            waiting = select.poll()
            for pidfd in self._pidfds.values():
                waiting.register(pidfd, select.POLLIN)
            before = now()
            exited = {fd for fd, _ in waiting.poll(1000 * timeout)}
            looked = now()
            for pid, pidfd in list(self._pidfds.items()):
                if pidfd in exited:
                    self._dead_at[pid] = looked
                    os.close(self._pidfds.pop(pid))
                else:
                    self._last_alive[pid] = before
        if not self._pidfds and timeout:
            self._stop.wait(timeout)

    def fates(self) -> dict[int, ProcessFate]:
        with self._lock:
            return {pid: ProcessFate(pid, self._last_alive.get(pid), self._dead_at.get(pid))
                    for pid in self.tail.started}

    def alive(self) -> list[int]:
        with self._lock:
            return sorted(self._pidfds)


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
