"""The `poolsup` command on a PostgreSQL store, as a user runs it: with the server down,
each command says so in one line and exits 1 (the contract's "runtime failure (store
unreachable, ...)"), the password hidden; a wait that runs out while the store has not
answered yet is that failure too, not "still live" (exit 7), which it could not know, and
it still ends when its timeout says (a frozen Redis too)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.acceptance.test_cli import poolsup
from tests.helpers.pool import write_pool
from tests.helpers.redis_server import RedisServer, free_port

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
    assert "postgresql://app:***@127.0.0.1" in lines[0], lines[0]
    assert PASSWORD not in result.stdout + result.stderr


def without_psycopg(tmp_path: Path) -> dict[str, str]:
    """An environment whose Python has no psycopg, as where the postgres extra is not
    installed: a module of that name that is not found, first on the path."""
    shim = tmp_path / "no-extra"
    shim.mkdir()
    (shim / "psycopg.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'psycopg'\", name='psycopg')\n")
    path = os.pathsep.join(filter(None, [str(shim), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


@pytest.mark.parametrize("command", ["check", "run", "status"])
def test_without_the_postgres_extra_each_command_names_it_and_exits_2(
    tmp_path: Path, pool_name: str, command: str
) -> None:
    # `check` validates the config: a store this installation cannot open is refused
    # there, as `run` refuses it, not "ok" until the supervisor starts.
    store = f"postgresql://app:{PASSWORD}@127.0.0.1:{free_port()}/pool"
    config = write_pool(tmp_path, store=store, pool=pool_name, handlers=HANDLERS)

    result = subprocess.run([sys.executable, "-m", "supervisor.cli", command, "-c",
                             str(config)], capture_output=True, text=True, timeout=60,
                            env=without_psycopg(tmp_path))

    lines = result.stderr.strip().splitlines()
    assert (result.returncode, len(lines)) == (2, 1), result.stdout + result.stderr
    assert "pip install 'poolsup[postgres]'" in lines[0] and PASSWORD not in lines[0]


def test_check_refuses_a_postgres_url_libpq_cannot_read(tmp_path: Path,
                                                         pool_name: str) -> None:
    config = write_pool(tmp_path, store=f"postgresql://app:{PASSWORD}@[::1/pool",
                        pool=pool_name, handlers=HANDLERS)

    result = poolsup("check", "-c", str(config))

    lines = result.stderr.strip().splitlines()
    assert (result.returncode, len(lines)) == (2, 1), result.stdout + result.stderr
    assert "store URL 'postgresql://app:***@[::1/pool'" in lines[0], lines[0]
    assert PASSWORD not in result.stdout + result.stderr


def test_a_wait_on_a_frozen_store_ends_at_its_timeout_with_exit_1(
    tmp_path: Path, pool_name: str, own_redis: RedisServer
) -> None:
    config = write_pool(tmp_path, store=own_redis.url, pool=pool_name, handlers=HANDLERS)
    own_redis.pause()
    try:
        started = time.monotonic()
        result = poolsup("wait", "-c", str(config), "k1", "--timeout", "1")
        took = time.monotonic() - started
    finally:
        own_redis.resume()

    lines = result.stderr.strip().splitlines()
    assert (result.returncode, len(lines)) == (1, 1), result.stderr
    assert "no answer within 1 s" in lines[0], lines[0]
    assert took < 5.0, f"the wait took {took:.1f} s"  # the socket's own limit: 5 s a call
