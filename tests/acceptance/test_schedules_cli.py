"""`poolsup schedules` as a user reads it, against a real supervisor firing real ticks:
one row per schedule, whatever its producer's error looked like (a message of several
lines), and `--json` with that error's first line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.acceptance.test_cli import poolsup
from tests.helpers.pool import SupervisorProcess, wait_for

PRODUCERS = '''
import time

def fails(job):
    time.sleep(0.5)  # its tick shows "fired" meanwhile, as a slow producer's would
    raise RuntimeError("the feed list is unreachable\\nsecond line of the message")

def keeps_going(job):
    return {"start": []}
'''


def test_a_producer_error_of_several_lines_keeps_one_row_per_schedule(
    tmp_path: Path, pool_name: str
) -> None:
    (tmp_path / "producers.py").write_text(PRODUCERS)
    (tmp_path / "noop.py").write_text("def run(job):\n    return None\n")
    config = tmp_path / "pool.toml"
    config.write_text(f"""
[pool]
name = "{pool_name}"
store = "sqlite:///{tmp_path}/pool.db"

[supervisor]
capacity = 2

[handlers.noop]
path = "noop.py"

[schedules.fails]
every = 2
producer = "producers.py:fails"

[schedules.keeps_going]
every = 2
producer = "producers.py:keeps_going"
""")
    supervisor = SupervisorProcess(config, tmp_path / "supervisor.log").start()
    try:
        supervisor.wait_serving()

        def both_ended() -> list[dict[str, object]] | None:
            # "fired" is a tick whose producer has not ended yet: read again until none is.
            shown = poolsup("schedules", "-c", str(config), "--json")
            views: list[dict[str, object]] = json.loads(shown.stdout)
            return views if all(view["outcome"] not in (None, "fired") for view in views) else None

        views = wait_for(both_ended, 30, interval=0.3, message="both schedules' ticks to end")

        def error_shown() -> subprocess.CompletedProcess[str] | None:
            # A later tick shows "fired" until its producer ends: the table is read again.
            shown = poolsup("schedules", "-c", str(config))
            return shown if "the feed list is unreachable" in shown.stdout else None

        text = wait_for(error_shown, 30, interval=0.3, message="the producer's error shown")
    finally:
        supervisor.kill()

    failed = next(view for view in views if view["name"] == "fails")
    assert failed["outcome"] == "error", failed
    assert failed["detail"] == {
        "error": "producer failed: RuntimeError: the feed list is unreachable"}, failed
    rows = text.stdout.strip().splitlines()
    assert len(rows) == 3, text.stdout  # the header and one row per schedule
    assert "the feed list is unreachable" in rows[1], rows
