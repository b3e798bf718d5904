"""pool.toml's `max_jobs_per_child`: how many jobs of a handler one child may run."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.forks.launch import handler_table
from tests.unit.test_config import MINIMAL, error_for, load, write


def test_max_jobs_per_child_defaults_to_a_fresh_child_per_job(tmp_path: Path) -> None:
    config = load(write(tmp_path, MINIMAL))

    assert config.handlers["thumbnail"].max_jobs_per_child == 1
    assert handler_table(config.handlers)["thumbnail"]["max_jobs_per_child"] == 1


@pytest.mark.parametrize("value", [1, 3, 1000])
def test_max_jobs_per_child_is_read_and_passed_to_the_fork_server(
    tmp_path: Path, value: int
) -> None:
    config = load(write(tmp_path, MINIMAL + f"max_jobs_per_child = {value}\n"))

    assert config.handlers["thumbnail"].max_jobs_per_child == value
    assert handler_table(config.handlers)["thumbnail"]["max_jobs_per_child"] == value


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("0", "must be at least 1 (got 0)"),
        ("-2", "must be at least 1 (got -2)"),
        ("2.5", "must be an integer (got 2.5)"),
        ("true", "must be an integer (got true)"),
        ('"3"', 'must be an integer (got "3")'),
    ],
)
def test_bad_max_jobs_per_child_is_one_line_naming_the_key(
    tmp_path: Path, text: str, problem: str
) -> None:
    message = error_for(tmp_path, MINIMAL + f"max_jobs_per_child = {text}\n")

    assert message.endswith(f":6: [handlers.thumbnail] max_jobs_per_child {problem}"), message
