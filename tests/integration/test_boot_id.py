"""The SQLite store's boot check against real processes: a command run where the boot id
cannot be read (a unit with ProcSubset=pid, a container that hides /proc/sys) leaves every
lease alone, and a file that another host wrote is refused.

The hidden boot id is made for real: a mount namespace (`unshare -m`) with /dev/null bound
over /proc/sys/kernel/random/boot_id, as root.  Where that is not allowed the tests skip.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.pool import assert_one_process_at_a_time, read_ledger, wait_for
from tests.integration.conftest import Pool

BOOT_ID = "/proc/sys/kernel/random/boot_id"
MACHINE_ID = "/etc/machine-id"
LEDGER = {"ledger": {"path": "ledger.py", "timeout": 0, "max_attempts": 3}}


def in_namespace(binds: dict[str, str], *command: str) -> subprocess.CompletedProcess[str]:
    """Run `command` in a mount namespace of its own where each target in `binds`
    shows the file named there instead."""
    mounts = " && ".join(f"mount --bind {source} {target}" for target, source in binds.items())
    return subprocess.run(["unshare", "-m", "sh", "-c", f'{mounts} && exec "$@"', "sh",
                           *command], capture_output=True, text=True, timeout=60)


def poolsup(*args: str) -> tuple[str, ...]:
    return (sys.executable, "-m", "supervisor.cli", *args)


@pytest.fixture(autouse=True)
def _namespaces_allowed() -> None:
    probe = in_namespace({BOOT_ID: "/dev/null"}, "cat", BOOT_ID)
    if probe.returncode != 0 or probe.stdout:
        pytest.skip(f"cannot hide the boot id in a mount namespace here: {probe.stderr.strip()}")


@pytest.fixture
def sqlite_pool(tmp_path: Path, pool_name: str) -> Iterator[Pool]:
    pool = Pool(tmp_path, f"sqlite:///{tmp_path}/pool.db", pool_name)
    yield pool
    pool.close()


def test_a_command_that_cannot_read_the_boot_id_expires_no_lease(
    sqlite_pool: Pool, ledger: Path
) -> None:
    pool, lease_ttl = sqlite_pool, 2
    first = pool.config(LEDGER, file="a.toml", id="a", lease_ttl=lease_ttl)
    pool.start(first)
    client = pool.client()
    client.dispatch("long", {"ledger": str(ledger), "seconds": 6 * lease_ttl}, handler="ledger")
    wait_for(lambda: client.job("long")["state"] == "running", 20, message="the job to run")
    before = client.job("long")

    status = in_namespace({BOOT_ID: "/dev/null"}, *poolsup("status", "-c", str(first)))
    assert status.returncode == 0, status.stderr

    after = client.job("long")
    assert (after["state"], after["supervisor"], after["token"]) == ("running", "a", 1)
    assert after["lease_deadline"] >= before["lease_deadline"], "the lease was cut short"
    assert [s["id"] for s in client.status()["supervisors"]] == ["a"]

    # A second supervisor on the same file finds a live lease: nothing to claim.
    pool.start(pool.config(LEDGER, file="b.toml", id="b", lease_ttl=lease_ttl))
    time.sleep(2 * lease_ttl)
    record = client.job("long")
    assert (record["state"], record["supervisor"], record["token"]) == ("running", "a", 1)
    record = wait_for(lambda: client.job("long")["state"] == "succeeded" and client.job("long"),
                      12 * lease_ttl, message="the job to finish")
    assert (record["token"], record["attempts"]) == (1, 1), record
    assert {line.token for line in read_ledger(ledger)} == {1}
    assert_one_process_at_a_time(read_ledger(ledger))


def test_a_file_written_by_another_host_is_refused(sqlite_pool: Pool, tmp_path: Path) -> None:
    if not Path(MACHINE_ID).is_file():
        pytest.skip(f"no {MACHINE_ID} on this host to tell it from another")
    pool = sqlite_pool
    config = pool.config(LEDGER, id="a")
    pool.start(config)
    client = pool.client()
    client.dispatch("long", {"ledger": str(tmp_path / "ledger.txt"), "seconds": 60},
                    handler="ledger")
    wait_for(lambda: client.job("long")["state"] == "running", 20, message="the job to run")
    other_boot = tmp_path / "other-boot-id"
    other_boot.write_text("5d0c4f3e-0d4a-4e55-9a43-2c1f0b6e7a11\n")
    other_machine = tmp_path / "other-machine-id"
    other_machine.write_text("0123456789abcdef0123456789abcdef\n")

    status = in_namespace({BOOT_ID: str(other_boot), MACHINE_ID: str(other_machine)},
                          *poolsup("status", "-c", str(config)))

    assert status.returncode != 0, status.stdout
    (line,) = status.stderr.strip().splitlines()
    assert "another host" in line and str(tmp_path / "pool.db") in line, line
    record = client.job("long")
    assert (record["state"], record["supervisor"], record["token"]) == ("running", "a", 1)
    assert [s["id"] for s in client.status()["supervisors"]] == ["a"]
