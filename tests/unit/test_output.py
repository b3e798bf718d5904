import logging

import pytest

from supervisor.job import output
from supervisor.job.output import OutputPump


def test_lines_reach_the_log_with_the_key(caplog: pytest.LogCaptureFixture) -> None:
    pump = OutputPump("k1")
    with caplog.at_level(logging.INFO, logger="poolsup.output"):
        pump.feed(b"hello\nwor")
        pump.feed(b"ld\n")
        pump.flush()
    assert [r.getMessage() for r in caplog.records] == ["[k1] hello", "[k1] world"]


def test_a_flood_is_bounded_but_the_tail_is_kept(caplog: pytest.LogCaptureFixture) -> None:
    # A stopped clock: the flood arrives in one instant, however loaded the machine is.
    pump = OutputPump("k1", clock=lambda: 1000.0)
    lines = [f"line {i}".encode() for i in range(50_000)]
    with caplog.at_level(logging.INFO, logger="poolsup.output"):
        for start in range(0, len(lines), 1000):
            pump.feed(b"\n".join(lines[start:start + 1000]) + b"\n")
        pump.flush()
    logged = [r for r in caplog.records if r.levelno == logging.INFO]
    assert len(logged) <= output.BURST + 10
    assert any("not logged" in r.getMessage() for r in caplog.records)
    assert pump.tail().splitlines()[-1] == "line 49999"
    assert len(pump.tail().splitlines()) == output.TAIL_LINES


def test_an_endless_line_is_cut() -> None:
    pump = OutputPump("k1")
    pump.feed(b"x" * (output.MAX_LINE * 3))
    pump.flush()
    assert max(len(line) for line in pump.tail().splitlines()) <= output.MAX_LINE
