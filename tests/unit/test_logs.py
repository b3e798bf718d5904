"""The log queue: what the writer thread prints is what was true when the line was
logged, whichever side of the queue formatted it."""

from __future__ import annotations

import logging

import orjson
import pytest

from supervisor.observe.job_log import JobLog
from supervisor.service.logs import logging_to_stderr

log = logging.getLogger("poolsup.test")


@pytest.fixture(autouse=True)
def _restore_root_level() -> object:
    root = logging.getLogger()
    level = root.level
    yield
    root.setLevel(level)


def test_a_job_line_reads_as_logged_with_its_time_and_level(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with logging_to_stderr("info"):
        JobLog(log, "job-1", 7).info("succeeded")
    line = capsys.readouterr().err.strip()
    assert line.endswith(" INFO poolsup.test: [job-1] succeeded (token 7)")
    assert line[:4].isdigit()  # the timestamp


def test_a_changing_argument_is_shown_as_it_was_when_logged(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pending = ["a"]
    with logging_to_stderr("info"):
        log.info("pending: %s", pending)
        pending.append("b")
    assert capsys.readouterr().err.strip().endswith("pending: ['a']")


def test_json_lines_keep_the_job_key_and_token(capsys: pytest.CaptureFixture[str]) -> None:
    with logging_to_stderr("info", "json"):
        JobLog(log, "k 1", 12).warning("lease lost")
        try:
            raise ValueError("boom")
        except ValueError:  # formatted before it is queued
            JobLog(log, "k 2", 13).exception("failed")
    first, second = (orjson.loads(line) for line in capsys.readouterr().err.splitlines())
    assert (first["key"], first["token"], first["level"]) == ("k 1", 12, "WARNING")
    assert (second["key"], second["token"]) == ("k 2", 13)
    assert (first["message"], second["message"]) == ("[k 1] lease lost (token 12)",
                                                     "[k 2] failed (token 13)")
    assert "ValueError: boom" in second["traceback"]


STALLED_WRITER = """
import logging, sys, time
from supervisor.service.logs import QUEUE_SIZE, logging_to_stderr
log = logging.getLogger("poolsup.test")
with logging_to_stderr("info"):
    began = time.monotonic()
    for n in range(3 * QUEUE_SIZE):
        log.info("line %d %s", n, "x" * 200)
    print(f"{time.monotonic() - began:.3f}", flush=True)
    sys.stdout.close()
    time.sleep(2)  # the reader starts reading stderr now, and the queue drains
    log.info("after the stall")
"""


def test_a_stalled_stderr_never_blocks_the_logger_and_drops_are_counted() -> None:
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", STALLED_WRITER], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    took = float(child.stdout.readline())  # type: ignore[union-attr]
    err = child.communicate(timeout=60)[1]

    assert took < 10.0
    assert "log record(s) dropped: stderr was not read fast enough" in err
    assert err.rstrip().endswith("after the stall")


class _CountingStream:
    def __init__(self) -> None:
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def fileno(self) -> int:
        raise OSError("not a file")


def test_lines_logged_together_reach_stderr_in_one_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A busy supervisor logs a line per finished job: the writer thread wakes once for
    the lines of a moment and writes them together, not once per line."""
    stream = _CountingStream()
    monkeypatch.setattr("sys.stderr", stream)
    with logging_to_stderr("info"):
        for n in range(50):
            JobLog(log, f"job-{n}", n).info("succeeded")
    text = "".join(stream.writes)
    assert [line.split("[", 1)[1] for line in text.splitlines()] == [
        f"job-{n}] succeeded (token {n})" for n in range(50)]
    assert len(stream.writes) <= 2
