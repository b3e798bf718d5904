"""A snooze's seconds, checked in the handler (`sandbox.Snooze`) and again where the
supervisor reads the child's message (a child is not trusted to have checked)."""

from __future__ import annotations

import math

import pytest

import sandbox
from sandbox import protocol
from supervisor.job.channel import ControlReader


@pytest.mark.parametrize("seconds", [0, 0.25, 30, protocol.MAX_SNOOZE])
def test_a_number_of_seconds_up_to_a_year_is_a_snooze(seconds: float) -> None:
    assert sandbox.Snooze(seconds).seconds == float(seconds)


@pytest.mark.parametrize("seconds", [-0.001, math.nan, math.inf, -math.inf,
                                     protocol.MAX_SNOOZE + 1, 10**400, True, "5", None, [1]])
def test_anything_else_is_refused_in_the_handler_with_one_line(seconds: object) -> None:
    with pytest.raises(ValueError, match=r"^sandbox\.Snooze takes [^\n]*$"):
        sandbox.Snooze(seconds)  # type: ignore[arg-type]


def reader() -> ControlReader:
    """A reader fed by hand (`feed`), as the job's socket callback feeds it."""
    return ControlReader(max_result=1000, on_ack=lambda seq: None,
                         on_checkpoint=lambda value: None)


def test_the_supervisor_reads_a_snooze_from_the_child() -> None:
    control = reader()
    control.feed(b'{"t":"snooze","seconds":12.5}\n')
    ended = control.exit_report(None)
    assert (ended.snooze, ended.protocol_error) == (12.5, None)


@pytest.mark.parametrize("line", [b'{"t":"snooze","seconds":-3}\n', b'{"t":"snooze"}\n',
                                  b'{"t":"snooze","seconds":1e300}\n'])
def test_a_bad_snooze_from_the_child_is_a_protocol_error(line: bytes) -> None:
    control = reader()
    control.feed(line)
    ended = control.exit_report(None)
    assert ended.snooze is None
    assert ended.protocol_error is not None
    assert ended.protocol_error.startswith("the child sent an invalid snooze: sandbox.Snooze takes")
