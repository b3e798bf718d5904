"""The `poolsup` command on a PostgreSQL store, as a user runs it: with the server down,
each command says so in one line and exits 1 (the contract's "runtime failure (store
unreachable, ...)"), the password hidden; a wait that runs out while the store has not
answered yet is that failure too, not "still live" (exit 7), which it could not know."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.acceptance.test_cli import poolsup
from tests.helpers.pool import write_pool
from tests.helpers.redis_server import free_port

HANDLERS = {"echo": {"path": "outcomes.py", "function": "async_echo"}}
PASSWORD = "pw-secret"


@pytest.mark.parametrize("command", [
    ("status",),
    ("jobs",),
    ("job", "k1"),
    ("dispatch", "k1"),
    ("wait", "k1"),
    # The store answers (refused) only after the pool's wait for a connection, some 2 s:
    # later than this timeout.
    ("wait", "k1", "--timeout", "0.5"),
    ("dispatch", "k1", "--wait", "--timeout", "0.5"),
])
def test_a_server_that_is_down_is_one_line_and_exit_1(tmp_path: Path, pool_name: str,
                                                       command: tuple[str, ...]) -> None:
    store = f"postgresql://app:{PASSWORD}@127.0.0.1:{free_port()}/pool"
    config = write_pool(tmp_path, store=store, pool=pool_name, handlers=HANDLERS)

    result = poolsup(command[0], "-c", str(config), *command[1:])

    lines = result.stderr.strip().splitlines()
    assert (result.returncode, len(lines)) == (1, 1), result.stderr
    assert "postgresql at postgresql://app:***@127.0.0.1" in lines[0], lines[0]
    assert PASSWORD not in result.stdout + result.stderr
