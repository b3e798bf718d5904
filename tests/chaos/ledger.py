"""The ledger the chaos handlers write (tests/handlers/chaos_jobs.py), read back as one
`Run` per job process, and what the driver's process monitor saw of those processes.

All times are CLOCK_BOOTTIME seconds, the clock every process of the host shares.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def now() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


@dataclass
class Run:
    """One process's run of a key's handler, as its ledger lines tell it."""

    key: str
    token: int
    pid: int
    attempt: int
    kind: str
    started: float
    last_line: float  # the last time the process proved it was alive
    resumed: Any = None  # the checkpoint it started from
    ended: str | None = None  # "return", "raise", "stop:<reason>"; None: no end line
    notes: list[int] = field(default_factory=list)
    saves: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class ProcessFate:
    """What the monitor saw of one job process: the last time it existed (not a zombie)
    and the first time it was gone, or None if it never saw that."""

    pid: int
    last_alive: float | None
    dead_at: float | None


def parse_lines(lines: Iterable[str]) -> list[Run]:
    """Runs in order of their start.  A torn last line (a process killed mid-write) is
    skipped; lines of a process whose start line is missing are ignored.  A run is its
    pid and token: the kernel hands a pid out again once the pids wrap (a 30-minute run
    forks tens of thousands), and a reused child runs several jobs under one pid."""
    runs: dict[tuple[int, int], Run] = {}
    for raw in lines:
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            continue
        event, pid = line["e"], line["p"]
        if event == "start":
            runs[pid, line["t"]] = Run(
                key=line["k"], token=line["t"], pid=pid, attempt=line["attempt"],
                kind=line["kind"], started=line["at"], last_line=line["at"],
                resumed=line.get("cp"))
            continue
        run = runs.get((pid, line["t"]))
        if run is None or run.key != line["k"]:
            continue
        run.last_line = max(run.last_line, line["at"])
        if event == "note":
            run.notes.append(line["n"])
        elif event == "save":
            run.saves.append(line["cp"])
        elif event == "end":
            run.ended = line["why"]
    return sorted(runs.values(), key=lambda run: run.started)


def read_ledger(path: Path) -> list[Run]:
    if not path.exists():
        return []
    return parse_lines(path.read_text().splitlines())


class LedgerTail:
    """Reads a growing ledger file incrementally: the pids that started and whether
    they wrote their end line (for the process monitor)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""
        self.started: set[int] = set()
        self.ended: set[int] = set()

    def poll(self) -> None:
        try:
            with self.path.open("rb") as ledger:
                ledger.seek(self._offset)
                data = ledger.read()
        except FileNotFoundError:
            return
        self._offset += len(data)
        *complete, self._partial = (self._partial + data).split(b"\n")
        for raw in complete:
            if b'"e":"start"' in raw or b'"e":"end"' in raw:
                try:
                    line = json.loads(raw)
                except json.JSONDecodeError:
                    continue
                (self.started if line["e"] == "start" else self.ended).add(line["p"])
