"""The Python client as a program uses it, on each store."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

EXIT_WITHIN = 20.0  # seconds; a program that hangs at exit never ends at all


@pytest.fixture(params=["redis", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "redis":
        return str(request.getfixturevalue("redis_url"))
    return f"sqlite:///{tmp_path}/pool.db"


@pytest.mark.parametrize(
    ("ending", "exit_code"), [("", 0), ("raise SystemExit(3)", 3), ("1 / 0", 1)]
)
def test_a_program_that_never_closes_its_client_still_exits(
    store_url: str, pool_name: str, ending: str, exit_code: int
) -> None:
    # As redis-py's clients do: forgetting close(), or an exception before it, must not
    # leave the program hanging at exit.
    program = (
        "from supervisor import Client\n"
        f"client = Client({store_url!r}, pool={pool_name!r})\n"
        "client.status()\n"
        f"{ending}\n"
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                            timeout=EXIT_WITHIN)
    assert result.returncode == exit_code, result.stderr


def test_ctrl_c_in_a_wait_ends_the_program(store_url: str, pool_name: str) -> None:
    program = (
        # Ctrl-C as a program started from a terminal gets it: the test runner's worker
        # may pass SIGINT on ignored, and Python keeps an ignored SIGINT ignored.
        "import signal\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from supervisor import Client\n"
        f"client = Client({store_url!r}, pool={pool_name!r})\n"
        "client.dispatch('never-runs', {}, handler='nobody')\n"
        "print('waiting', flush=True)\n"
        "client.wait('never-runs')\n"
    )
    process = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdout.readline() == "waiting\n"
        time.sleep(0.5)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=EXIT_WITHIN)
    finally:
        process.kill()
        process.communicate()
    assert "KeyboardInterrupt" in stderr
    assert process.returncode == -signal.SIGINT, stderr  # as Python ends on Ctrl-C


def test_connection_with_another_store_raises_the_usage_error_the_package_exports(
    store_url: str, pool_name: str
) -> None:
    # The contract: `connection=` "with any other store raises `UsageError`", which a
    # program catches as `from supervisor import UsageError`.
    program = (
        "import asyncio\n"
        "from supervisor import AsyncClient, Client, PoolsupError, UsageError\n"
        "assert issubclass(UsageError, PoolsupError)\n"
        f"client = Client({store_url!r}, pool={pool_name!r})\n"
        "for call in (lambda: client.dispatch('k', {}, handler='h', connection=object()),\n"
        "             lambda: client.dispatch_many([{'key': 'k', 'handler': 'h'}],\n"
        "                                          connection=object())):\n"
        "    try:\n"
        "        call()\n"
        "    except UsageError as error:\n"
        "        print('UsageError:', error)\n"
        "client.close()\n"
        "async def main():\n"
        f"    async with AsyncClient({store_url!r}, pool={pool_name!r}) as aclient:\n"
        "        try:\n"
        "            await aclient.dispatch('k', {}, handler='h', connection=object())\n"
        "        except UsageError as error:\n"
        "            print('UsageError:', error)\n"
        "asyncio.run(main())\n"
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                            timeout=EXIT_WITHIN)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 3 and all("PostgreSQL" in line for line in lines), result.stdout
