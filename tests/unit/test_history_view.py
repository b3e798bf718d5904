"""`job KEY` in text: one line per event of the job's history."""

from __future__ import annotations

from supervisor.cli.history_view import event_lines


def test_each_event_is_one_line_with_its_time_run_and_detail() -> None:
    lines = event_lines([
        {"at": 1_700_000_000.0, "event": "dispatched", "supervisor": None, "token": None,
         "detail": None},
        {"at": 1_700_000_001.25, "event": "started", "supervisor": "web-1", "token": 7,
         "detail": "attempt 1, pid 4242"},
    ])

    assert lines == [
        "2023-11-14T22:13:20.000Z  dispatched",
        "2023-11-14T22:13:21.250Z  started     web-1 (token 7)  attempt 1, pid 4242",
    ]
