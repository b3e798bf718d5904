from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from supervisor import Client
from supervisor.store import opened_store
from supervisor.store.base import Store
from tests.helpers.pool import SupervisorProcess, write_pool
from tests.helpers.redis_server import RedisServer


class Pool:
    """One pool under test: its config, its supervisors, a client."""

    def __init__(self, directory: Path, store: str, name: str) -> None:
        self.directory = directory
        self.store = store
        self.name = name
        self.supervisors: list[SupervisorProcess] = []
        self._clients: list[Client] = []

    def config(self, handlers: dict[str, dict[str, Any]], *, file: str = "pool.toml",
               pool_options: dict[str, Any] | None = None, **supervisor: Any) -> Path:
        return write_pool(self.directory, store=self.store, pool=self.name, handlers=handlers,
                          name=file, pool_options=pool_options, **supervisor)

    def start(
        self, config: Path, *, serving: bool = True, new_session: bool = False,
        env: dict[str, str] | None = None, args: tuple[str, ...] = (),
    ) -> SupervisorProcess:
        index = len(self.supervisors)
        process = SupervisorProcess(config, self.directory / f"supervisor-{index}.log").start(
            env, new_session=new_session, args=args
        )
        self.supervisors.append(process)
        if serving:
            process.wait_serving()
        return process

    def client(self) -> Client:
        client = Client(self.store, pool=self.name)
        self._clients.append(client)
        return client

    def close(self) -> None:
        for process in self.supervisors:
            process.kill()
        for client in self._clients:
            client.close()

    def logs(self) -> str:
        return "\n".join(f"--- {p.log_path.name}\n{p.log()}" for p in self.supervisors)


# The supervisor-level tests that also run on PostgreSQL: one or two per guarantee and per
# way a hint travels (wake, stop, notify, debug, a job's end), not every test: the suite
# keeps within its time on a 2-core CI machine.  Its conformance suite (tests/store) runs
# whole on PostgreSQL, which covers what is left out here store by store (ticks once per
# tick, rate limits, a backlog per handler, status); test_postgres_*.py and
# test_transactional_dispatch.py add failover, errors and the caller's transaction.
ON_POSTGRES = frozenset({
    "test_guarantees.py::test_guarantee_4_failover_after_sigkill",
    "test_guarantees.py::test_guarantee_1_frozen_supervisor_never_runs_twice",
    "test_guarantees.py::test_concurrent_supervisors_run_each_job_once",
    "test_edges.py::test_guarantee_2_notes_not_taken_before_a_drain_reach_the_next_run",
    "test_rebalance.py::test_guarantee_7_a_joiner_takes_half_of_four_long_running_jobs",
    "test_rebalance.py::test_guarantee_7_a_stop_and_notes_sent_during_a_move_are_not_lost",
    "test_rebalance.py::test_guarantee_2_a_rolling_restart_loses_nothing_and_ends_no_long_running_job",
    "test_schedules.py::test_guarantee_9_a_producer_starts_stops_and_keeps_only_its_own_jobs",
    "test_steering.py::test_max_running_holds_across_supervisors_and_a_sigkill",
    "test_steering.py::test_pause_stops_every_supervisor_and_survives_a_restart",
    "test_outcomes.py::test_retries_with_backoff_until_success",
    "test_outcomes.py::test_stop_ends_a_running_job_stopped",
    "test_outcomes.py::test_drain_timeout_releases_without_spending_an_attempt",
    "test_debug.py::test_debug_names_the_busy_line_of_a_running_job",
    "test_job_output.py::test_logs_shows_a_jobs_output_while_it_runs_and_after_it_ended",
    "test_snooze.py::test_a_snoozed_job_runs_again_after_its_delay_with_the_same_attempt",
    "test_tracing.py::test_an_attempt_is_a_span_of_the_dispatch_with_the_handlers_spans_below_it",
    "test_shared_children.py::test_guarantee_14_a_stubborn_task_of_a_frozen_supervisor_is_fenced_before_others_run_it",
    "test_shared_children.py::test_a_stop_cancels_one_task_and_its_siblings_in_the_same_child_run_on",
})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the [postgres] runs of the tests not in ON_POSTGRES."""
    kept, dropped = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        on_postgres = callspec is not None and callspec.params.get("store_url") == "postgres"
        name = f"{item.path.name}::{item.originalname}"  # type: ignore[attr-defined]
        (dropped if on_postgres and name not in ON_POSTGRES else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(params=["redis", "sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path, redis_url: str) -> str:
    """Every supervisor-level test runs on Redis and SQLite, and those of ON_POSTGRES on
    PostgreSQL too."""
    if request.param == "redis":
        return redis_url
    if request.param == "postgres":
        url: str = request.getfixturevalue("postgres_url")
        return url
    return f"sqlite:///{tmp_path}/pool.db"


@pytest.fixture
def pool(tmp_path: Path, store_url: str, pool_name: str) -> Iterator[Pool]:
    pool = Pool(tmp_path, store_url, pool_name)
    yield pool
    pool.close()


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "ledger.txt"


@pytest.fixture
async def redis_store(redis_server: RedisServer, pool_name: str) -> AsyncIterator[Store]:
    """A Redis store of its own pool, for tests that drive the supervisor's parts
    in-process against a real Redis."""
    async with opened_store(redis_server.url, pool_name) as store:
        yield store
