"""A background loop outlives its own bugs (`supervisor.service.loops.supervised`), on trio's
MockClock: the backoff between restarts is real anyio sleeping, on a clock that jumps."""

from __future__ import annotations

import logging

import anyio
import pytest
import trio.testing

from supervisor.service.loops import supervised

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, object]]:
    return "trio", {"clock": trio.testing.MockClock(autojump_threshold=0)}


class Flaky:
    """A loop that raises `failures` times, then runs until cancelled or returns."""

    def __init__(self, failures: int, *, then_return: bool = True) -> None:
        self.failures = failures
        self.then_return = then_return
        self.runs: list[float] = []

    async def run(self) -> None:
        self.runs.append(anyio.current_time())
        if len(self.runs) <= self.failures:
            raise KeyError(f"bug {len(self.runs)}")
        if not self.then_return:
            await anyio.sleep_forever()


async def test_a_failing_loop_is_logged_with_its_traceback_and_restarted_with_backoff(
    caplog: pytest.LogCaptureFixture,
) -> None:
    flaky = Flaky(3)
    with caplog.at_level(logging.ERROR, logger="poolsup"):
        await supervised("claimer", flaky.run)
    assert len(flaky.runs) == 4
    gaps = [later - earlier for earlier, later in zip(flaky.runs, flaky.runs[1:], strict=False)]
    assert gaps == pytest.approx([0.1, 0.2, 0.4])
    failures = [record for record in caplog.records if "claimer loop failed" in record.message]
    assert len(failures) == 3
    assert all(record.exc_info and record.exc_info[0] is KeyError for record in failures)


async def test_its_siblings_keep_running() -> None:
    ticks: list[float] = []

    async def sibling() -> None:
        while True:
            ticks.append(anyio.current_time())
            await anyio.sleep(1.0)

    flaky = Flaky(1000, then_return=False)
    with anyio.move_on_after(30):
        async with anyio.create_task_group() as group:
            group.start_soon(sibling)
            group.start_soon(supervised, "scheduler", flaky.run)
    assert len(ticks) >= 30
    assert len(flaky.runs) > 10  # restarted all along, at most 5 s apart
    assert max(b - a for a, b in zip(flaky.runs, flaky.runs[1:], strict=False)) <= 5.0


async def test_a_fatal_loop_calls_on_death_once_and_is_not_restarted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    deaths: list[float] = []
    flaky = Flaky(5)
    with caplog.at_level(logging.CRITICAL, logger="poolsup"):
        await supervised("lease keeper", flaky.run, lambda: deaths.append(anyio.current_time()))
    assert len(flaky.runs) == 1
    assert len(deaths) == 1
    assert any(record.exc_info for record in caplog.records)


async def test_cancelling_a_supervised_loop_is_not_a_failure() -> None:
    flaky = Flaky(0, then_return=False)
    with anyio.move_on_after(1):
        await supervised("rebalancer", flaky.run)
    assert len(flaky.runs) == 1
