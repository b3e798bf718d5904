"""`poolsup pause` and `poolsup resume` from outside: exit codes, what `status` shows, and
a handler name the config does not know."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.acceptance.test_cli import poolsup
from tests.helpers.pool import write_pool


@pytest.fixture
def config(tmp_path: Path, redis_url: str, pool_name: str) -> Path:
    return write_pool(tmp_path, store=redis_url, pool=pool_name,
                      handlers={"echo": {"path": "outcomes.py", "function": "async_echo"}})


def paused(config: Path) -> dict[str, object]:
    done = poolsup("status", "-c", str(config), "--json")
    assert done.returncode == 0, done.stderr
    return orjson.loads(done.stdout)["paused"]  # type: ignore[no-any-return]


def test_pause_and_resume_show_in_status(config: Path) -> None:
    assert paused(config) == {"pool": False, "handlers": []}

    done = poolsup("pause", "-c", str(config), "echo")
    assert (done.returncode, done.stdout.strip()) == (0, "paused echo"), done.stderr
    assert paused(config) == {"pool": False, "handlers": ["echo"]}
    assert poolsup("pause", "-c", str(config)).returncode == 0
    assert paused(config) == {"pool": True, "handlers": ["echo"]}
    text = poolsup("status", "-c", str(config)).stdout
    assert "paused: the whole pool" in text and "paused handlers: echo" in text

    assert poolsup("resume", "-c", str(config)).stdout.strip() == "resumed the pool"
    assert poolsup("resume", "-c", str(config), "echo").returncode == 0
    assert paused(config) == {"pool": False, "handlers": []}


def test_pausing_an_unknown_handler_is_a_one_line_error(config: Path) -> None:
    done = poolsup("pause", "-c", str(config), "nosuch")

    assert done.returncode == 2
    assert "unknown handler 'nosuch'" in done.stderr and done.stderr.count("\n") == 1
