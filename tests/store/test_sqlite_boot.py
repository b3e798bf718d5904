"""The SQLite store's boot check: a reboot of this host expires every lease, a boot id
that cannot be read changes nothing, and a file another host wrote is refused."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from supervisor.errors import ConfigError
from supervisor.store.records import DispatchRequest
from supervisor.store.sqlite import schema as sqlite_schema
from supervisor.store.sqlite.store import SqliteStore
from tests.store.support import supervisor

pytestmark = pytest.mark.anyio

BOOT, LATER_BOOT = "63a69a32-edd3-45b3-be5e-07eec7d31bec", "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"
HERE, THERE = "3d1219c7c4c5404aaa1f6d2a48adfda4", "0123456789abcdef0123456789abcdef"


class Host:
    """The boot id and machine id files the store reads, as a test sets them."""

    def __init__(self, directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.boot_file = directory / "boot_id"
        self.machine_file = directory / "machine-id"
        monkeypatch.setattr(sqlite_schema, "BOOT_ID_FILE", self.boot_file)
        monkeypatch.setattr(sqlite_schema, "MACHINE_ID_FILES", (self.machine_file,),
                            raising=False)

    def set(self, boot: str | None, machine: str | None) -> None:
        for path, value in ((self.boot_file, boot), (self.machine_file, machine)):
            if value is None:
                path.unlink(missing_ok=True)
            else:
                path.write_text(value + "\n")


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Host:
    host = Host(tmp_path, monkeypatch)
    host.set(BOOT, HERE)
    return host


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/pool.db"


async def hold_a_lease(url: str) -> float:
    """A registered supervisor holding one running job; its lease deadline."""
    store = await SqliteStore.open(url, "media")
    try:
        await store.register(supervisor("sup-a", instance="i-1"))
        await store.dispatch(DispatchRequest(key="k1", handler="h", payload=b"{}",
                                             max_attempts=3))
        (job,) = (await store.claim("sup-a", ["h"], 1, 30.0, 3)).jobs
        return job.lease_deadline
    finally:
        await store.close()


async def lease_and_members(url: str) -> tuple[str, str | None, float, list[str]]:
    """The job's state, owner and lease deadline, and the live supervisors, as a new
    opener of the file sees them."""
    store = await SqliteStore.open(url, "media")
    try:
        record = await store.job("k1")
        members = [m.info.id for m in (await store.members()).members]
        assert record.lease_deadline is not None
        return record.state, record.supervisor, record.lease_deadline, members
    finally:
        await store.close()


def unchanged(deadline: float) -> tuple[str, str, object, list[str]]:
    return "running", "sup-a", pytest.approx(deadline, abs=0.05), ["sup-a"]


def file_boot(url: str) -> str:
    with sqlite3.connect(sqlite_schema.path_from_url(url)) as conn:
        return str(conn.execute("SELECT boot_id FROM host").fetchone()[0])


@pytest.mark.parametrize("unreadable", [None, "", "not a boot id"])
async def test_a_boot_id_that_cannot_be_read_expires_nothing_and_is_not_stored(
    host: Host, url: str, unreadable: str | None
) -> None:
    deadline = await hold_a_lease(url)
    host.set(unreadable, HERE)

    assert await lease_and_members(url) == unchanged(deadline)
    assert file_boot(url) == BOOT
    # Nor does the next opener that reads the boot id take the open for a reboot.
    host.set(BOOT, HERE)
    assert await lease_and_members(url) == unchanged(deadline)


async def test_a_reboot_of_the_same_machine_expires_every_lease(host: Host, url: str) -> None:
    await hold_a_lease(url)
    host.set(LATER_BOOT, HERE)

    state, owner, deadline, members = await lease_and_members(url)
    assert (state, owner, members) == ("running", "sup-a", [])
    assert deadline < time.time() - 1, "the lease of the last boot still counts"
    assert file_boot(url) == LATER_BOOT


async def test_a_reboot_where_the_machine_id_cannot_be_read_expires_every_lease(
    host: Host, url: str
) -> None:
    await hold_a_lease(url)
    host.set(LATER_BOOT, None)

    assert (await lease_and_members(url))[3] == []


async def test_a_file_another_machine_wrote_during_its_boot_is_refused(
    host: Host, url: str
) -> None:
    deadline = await hold_a_lease(url)
    host.set(LATER_BOOT, THERE)

    with pytest.raises(ConfigError, match=r"^SQLite store .*pool\.db: used by another host "):
        await SqliteStore.open(url, "media")

    host.set(BOOT, HERE)
    assert await lease_and_members(url) == unchanged(deadline)
    assert file_boot(url) == BOOT


async def test_containers_of_one_kernel_each_count_as_this_host_after_a_reboot(
    host: Host, url: str
) -> None:
    await hold_a_lease(url)
    host.set(BOOT, THERE)  # another container, same kernel
    await lease_and_members(url)
    host.set(LATER_BOOT, THERE)  # the host rebooted; that container opens the file first

    assert (await lease_and_members(url))[3] == []


async def test_a_file_created_without_a_boot_id_takes_the_first_one_read(
    host: Host, url: str
) -> None:
    host.set(None, HERE)
    deadline = await hold_a_lease(url)
    assert file_boot(url) == ""

    host.set(BOOT, HERE)
    assert await lease_and_members(url) == unchanged(deadline)
    assert file_boot(url) == BOOT
