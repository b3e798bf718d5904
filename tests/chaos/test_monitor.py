"""The ledger and the process monitor with real processes: the chaos handlers' own
`Ledger` writes the lines, the monitor times each exit with a pidfd, and the checker
then catches two real processes of one key alive at once (and passes them one after
the other)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.chaos.checker import History, check
from tests.chaos.ledger import now, read_ledger
from tests.chaos.monitor import ProcessMonitor

HANDLERS = Path(__file__).resolve().parent.parent / "handlers" / "chaos_jobs.py"


def job_process(ledger: Path, key: str, token: int, seconds: float) -> subprocess.Popen[bytes]:
    """A process that runs like a chaos job: start line, alive lines, end line."""
    code = textwrap.dedent(f"""
        import importlib.util, time, types
        spec = importlib.util.spec_from_file_location("chaos_jobs", {str(HANDLERS)!r})
        jobs = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(jobs)
        job = types.SimpleNamespace(key={key!r}, token={token}, attempt=1, checkpoint=None,
                                    payload={{"ledger": {str(ledger)!r}}})
        ledger = jobs.Ledger(job, "short")
        time.sleep({seconds})
        ledger.end("return")
    """)
    return subprocess.Popen([sys.executable, "-c", code])


def watched(ledger: Path, starts: list[tuple[str, int, float, float]]) -> History:
    """Run job processes (key, token, delay after the previous start, seconds) under the
    monitor, and return the history the checker is given."""
    monitor = ProcessMonitor(ledger).start()
    processes = []
    try:
        for key, token, delay, seconds in starts:
            time.sleep(delay)
            processes.append(job_process(ledger, key, token, seconds))
        for process in processes:
            assert process.wait(10) == 0
        deadline = time.monotonic() + 5
        while monitor.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        monitor.stop()
    runs = read_ledger(ledger)
    return History(runs=runs, fates=monitor.fates(), kinds={run.key: "short" for run in runs},
                   records={run.key: {"state": "succeeded"} for run in runs})


def test_the_monitor_times_each_exit_of_a_real_process(tmp_path: Path) -> None:
    started = now()
    history = watched(tmp_path / "ledger", [("k", 1, 0.0, 0.3)])
    [run] = history.runs
    fate = history.fates[run.pid]
    assert run.ended == "return"
    assert fate.last_alive is not None and fate.dead_at is not None
    assert started < run.started < run.last_line <= fate.dead_at < now()
    assert fate.dead_at - run.last_line < 0.5
    assert run.last_line - run.started > 0.25  # alive lines while it slept


def test_two_real_processes_of_a_key_alive_at_once_are_caught(tmp_path: Path) -> None:
    history = watched(tmp_path / "ledger", [("k", 1, 0.0, 1.0), ("k", 2, 0.3, 0.2)])
    report = check(history)
    [violation] = report.violations
    assert violation.kind == "overlap"
    assert violation.message.startswith("key k: pid ")
    assert "(token 1) was alive" in violation.message


def test_real_processes_one_after_the_other_pass(tmp_path: Path) -> None:
    history = watched(tmp_path / "ledger", [("k", 1, 0.0, 0.2), ("k", 2, 0.8, 0.2),
                                            ("j", 3, 0.0, 0.2)])
    report = check(history)
    assert report.ok, report.violations
    assert report.counts["executions"] == 3
    assert report.counts["uncertain windows"] == 0
