"""OutputKeeper against a store that is slow or failing (a fake store: what is under
test is the keeper's batching, not a store): one write in flight at a time, only the
newest `max_bytes` waiting in memory, the rest counted as dropped, and what the store
gets is the newest bytes at their true offsets."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from supervisor.errors import StoreUnavailable
from supervisor.job.kept_output import OutputKeeper
from supervisor.observe.job_log import JobLog
from supervisor.observe.store_failures import StoreFailures

pytestmark = pytest.mark.anyio

MAX_BYTES = 1000


class SlowStore:
    """Takes appends as a store would, each held until `let_go`; fails the first
    `failures` of them."""

    def __init__(self, *, failures: int = 0) -> None:
        self.writes: list[tuple[int, bytes, bool]] = []  # taken: (at, data, ended)
        self.in_flight = 0
        self.most_in_flight = 0
        self.gate = anyio.Event()
        self.failures_left = failures

    def let_go(self) -> None:
        self.gate.set()

    async def append_output(self, lease: Any, attempt: int, data: bytes, *, at: int,
                            max_bytes: int, ended: bool = False) -> None:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await self.gate.wait()
            if self.failures_left:
                self.failures_left -= 1
                raise StoreUnavailable("store down")
            self.writes.append((at, data, ended))
        finally:
            self.in_flight -= 1

    def check_against(self, everything: bytes) -> int:
        """Every byte taken is the byte printed at its offset, the last write ends the
        run at its last byte; the bytes never taken (what the keeper must count as
        dropped)."""
        end = never_taken = 0
        for at, data, _ in self.writes:
            assert data == everything[at:at + len(data)]
            never_taken += max(0, at - end)
            end = max(end, at + len(data))
        assert end == len(everything)
        assert [ended for _, _, ended in self.writes] == [False] * (len(self.writes) - 1) + [True]
        return never_taken


def keeper_on(store: SlowStore, group: anyio.abc.TaskGroup) -> OutputKeeper:
    job = SimpleNamespace(key="k", token=1, lease=object(), claimed=SimpleNamespace(attempt=1),
                          log=JobLog(logging.getLogger("poolsup.jobs"), "k", 1))
    return OutputKeeper(job, store, StoreFailures("job output"),  # type: ignore[arg-type]
                        max_bytes=MAX_BYTES, start=group.start_soon)


def printed(count: int) -> list[bytes]:
    return [f"line {n:05d}\n".encode() for n in range(count)]


async def test_a_slow_store_gets_one_write_at_a_time_and_the_newest_bytes() -> None:
    store = SlowStore()
    lines = printed(2000)  # 22,000 bytes, far over MAX_BYTES
    async with anyio.create_task_group() as group:
        keeper = keeper_on(store, group)
        for line in lines:
            keeper.feed(line)
        await anyio.sleep(0.7)  # a batch is due: its write hangs in the store
        assert store.in_flight == 1
        for line in printed(3000)[2000:]:
            keeper.feed(line)
        lines = printed(3000)
        store.let_go()
        await keeper.finish()
    everything = b"".join(lines)
    assert store.most_in_flight == 1
    assert keeper.dropped == store.check_against(everything) > 0
    assert len(store.writes[-1][1]) <= MAX_BYTES


async def test_while_the_store_fails_only_the_newest_bytes_wait_in_memory() -> None:
    store = SlowStore(failures=3)
    store.let_go()
    async with anyio.create_task_group() as group:
        keeper = keeper_on(store, group)
        for line in printed(5000):
            keeper.feed(line)
            assert len(keeper._buffer) <= MAX_BYTES
        with anyio.fail_after(10):
            while store.failures_left:  # noqa: ASYNC110 - the keeper's own retry pace
                await anyio.sleep(0.05)
        await keeper.finish()
    everything = b"".join(printed(5000))
    assert keeper.dropped == store.check_against(everything) > 0
