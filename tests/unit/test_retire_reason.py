"""When a child that ran a job must not run another (`sandbox.reuse.retire_reason`)."""

from __future__ import annotations

from typing import Any

import pytest

from sandbox.reuse import RSS_WATERMARK, retire_reason

MIB = 1 << 20
CLEAN: dict[str, Any] = {"exit_code": 0, "stop_seen": False, "leftovers_gone": True,
                         "extra_threads": 0, "rss": 30 * MIB, "memory_limit": 100 * MIB}


def test_a_clean_child_is_reused() -> None:
    assert retire_reason(**CLEAN) is None


@pytest.mark.parametrize(("change", "reason"), [
    ({"exit_code": 1}, "its job ended with exit code 1"),
    ({"stop_seen": True}, "its job was asked to stop"),
    ({"leftovers_gone": False}, "processes its job left survived SIGKILL"),
    ({"extra_threads": 2}, "its job left 2 thread(s) running"),
    ({"rss": 76 * MIB}, f"its memory ({76 * MIB} bytes) is above 75% of memory_limit"),
])
def test_each_dirt_retires_the_child(change: dict[str, Any], reason: str) -> None:
    assert retire_reason(**{**CLEAN, **change}) == reason


def test_the_watermark_is_three_quarters_of_memory_limit_and_none_without_one() -> None:
    assert RSS_WATERMARK == 0.75
    assert retire_reason(**{**CLEAN, "rss": 75 * MIB}) is None
    assert retire_reason(**{**CLEAN, "rss": 10_000 * MIB, "memory_limit": None}) is None


def test_an_exit_code_is_named_before_anything_else() -> None:
    everything = {"exit_code": 143, "stop_seen": True, "leftovers_gone": False,
                  "extra_threads": 1, "rss": 99 * MIB}
    assert retire_reason(**{**CLEAN, **everything}) == "its job ended with exit code 143"
