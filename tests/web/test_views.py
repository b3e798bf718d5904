"""The dashboard's numbers for people (supervisor/web/views.py): pure functions."""

from __future__ import annotations

from supervisor.web.views import ago, duration, job_path, size


def test_durations_read_as_minutes_and_seconds() -> None:
    assert duration(None) == "-"
    assert duration(0.4) == "0.4 s"
    assert duration(45.2) == "45 s"
    assert duration(192.0) == "3 m 12 s"
    assert duration(3 * 3600 + 5 * 60 + 7) == "3 h 5 m"
    assert duration(2 * 86400 + 4 * 3600) == "2 d 4 h"
    assert duration(-3.0) == "-3 s"


def test_sizes_read_in_binary_units() -> None:
    assert size(None) == "-"
    assert size(512) == "512 B"
    assert size(12_900_000) == "12.3 MiB"
    assert size(3 * 1024**3) == "3.0 GiB"


def test_ages_read_as_time_ago() -> None:
    assert ago(None) == "-"
    assert ago(0.3) == "just now"
    assert ago(3.4) == "3 s ago"
    assert ago(200) == "3 m 20 s ago"


def test_a_job_path_quotes_every_special_character() -> None:
    assert job_path("a/b c?#") == "/jobs/a%2Fb%20c%3F%23"
