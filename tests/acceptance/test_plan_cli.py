"""`poolsup plan NAME` as a user runs it on a schedule's producer: what it would do, that
it would end the schedule (text and `--json` `end_schedule`), and a producer that fails
said in one line that names the schedule (the contract: errors are one line)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.acceptance.test_cli import poolsup

PRODUCERS = '''
from sandbox import EndSchedule

def ends(job):
    raise EndSchedule()

def last_batch(job):
    return {"start": [{"key": "batch-9", "handler": "noop", "payload": {}}],
            "end_schedule": True}

def keeps_going(job):
    return {"start": [{"key": "batch-1", "handler": "noop", "payload": {}}]}

def fails(job):
    raise RuntimeError("the feed list is unreachable\\nsecond line of the message")
'''


@pytest.fixture
def config(tmp_path: Path) -> str:
    (tmp_path / "producers.py").write_text(PRODUCERS)
    (tmp_path / "noop.py").write_text("def run(job):\n    return None\n")
    path = tmp_path / "pool.toml"
    path.write_text(f"""
[pool]
name = "p"
store = "sqlite:///{tmp_path}/pool.db"

[handlers.noop]
path = "noop.py"
""" + "".join(f"""
[schedules.{name}]
every = 3600
producer = "producers.py:{name}"
""" for name in ("ends", "last_batch", "keeps_going", "fails")))
    return str(path)


@pytest.mark.parametrize(("name", "start", "ends"), [
    ("ends", [], True), ("last_batch", ["batch-9"], True), ("keeps_going", ["batch-1"], False),
])
def test_plan_says_whether_the_producer_would_end_its_schedule(
    config: str, name: str, start: list[str], ends: bool
) -> None:
    shown = poolsup("plan", "-c", config, name, "--json")
    text = poolsup("plan", "-c", config, name)

    assert (shown.returncode, text.returncode) == (0, 0), shown.stderr + text.stderr
    plan = json.loads(shown.stdout)
    assert ([job["key"] for job in plan["start"]], plan["end_schedule"]) == (start, ends)
    assert ("end the schedule" in text.stdout) is ends, text.stdout


def test_a_producer_that_fails_is_one_line_naming_the_schedule(config: str) -> None:
    result = poolsup("plan", "-c", config, "fails")

    lines = result.stderr.strip().splitlines()
    assert (result.returncode, len(lines)) == (1, 1), result.stderr
    assert "fails" in lines[0] and "the feed list is unreachable" in lines[0], lines[0]


@pytest.mark.parametrize("command", ["schedules", "plan"])
def test_help_says_what_each_option_does_and_that_a_schedule_may_end(command: str) -> None:
    shown = poolsup(command, "--help")

    assert shown.returncode == 0, shown.stderr
    assert "end" in shown.stdout.partition("Options:")[0], shown.stdout
    options = shown.stdout.partition("Options:")[2].splitlines()
    bare = [line for line in options if line.strip().startswith("-")
            and len(line.strip().split(None, 1)) < 2]
    assert not bare, f"options without help: {bare}"
