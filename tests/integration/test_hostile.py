"""Hostile handlers, each run through a real supervisor (guarantees 5 and 8).

Every hostile job ends in its documented state with a reason a user can act on, leaves
no process of it on the machine (each handler notes its pids, and its grandchildren's,
in a file), and the supervisor then still runs a normal job. Some run also with
`max_jobs_per_child = 100` (`jobs_per_child`): the job's own child may then live on,
clean, for the next job, but nothing it started does. Each test prints how long
the cleanup took: from the job's `finished_at` to the last of its processes gone
(negative: everything was gone before the outcome was stored).
"""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from supervisor import Client
from tests.helpers.pool import SupervisorProcess, finished, wait_for
from tests.integration.conftest import Pool

HANDLERS: dict[str, dict[str, Any]] = {
    "normal": {"path": "basic.py", "function": "echo"},
    "raises": {"path": "hostile_raises.py", "max_attempts": 1},
    "segfault": {"path": "hostile_segfault.py", "max_attempts": 1},
    "memory": {"path": "hostile_memory.py", "memory_limit": "100MiB", "max_attempts": 1},
    "ignores_sigterm": {"path": "hostile_ignores_sigterm.py", "timeout": 0},
    "setsid_grandchild": {"path": "hostile_setsid_grandchild.py"},
    "daemon": {"path": "hostile_daemon.py", "timeout": 2, "max_attempts": 1},
    "daemon_untimed": {"path": "hostile_daemon.py", "timeout": 0},
    "never_returns": {"path": "hostile_never_returns.py", "timeout": 2, "max_attempts": 1},
    "cpu": {"path": "hostile_cpu.py", "cpu_limit": 1, "max_attempts": 1},
    "prints": {"path": "hostile_prints.py", "max_attempts": 1},
    "unserializable": {"path": "hostile_unserializable.py", "max_attempts": 1},
    "closes_stdout": {"path": "hostile_closes_stdout.py", "max_attempts": 1},
    "exits": {"path": "hostile_exits.py", "max_attempts": 1},
    "snoops": {"path": "hostile_snoops.py", "env.FROM_TABLE": "yes"},
}
SECRET = "hunter2"
# Also with max_jobs_per_child = 100: on Redis alone, to keep the suite within its time
# (the children are the same on every store).
with_reused_children = pytest.mark.parametrize(
    ("store_url", "jobs_per_child"), [("redis", 1), ("sqlite", 1), ("redis", 100)],
    indirect=["store_url"],
)
CLEANUP_BOUND = 3.0  # seconds from finished_at to the last process gone


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class ProcessWatch:
    """Notes, every few milliseconds, when each pid a handler recorded is gone."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.gone_at: dict[int, float] = {}
        self._seen: set[int] = set()
        self.first: int | None = None  # the job's own child: every handler notes it first
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._look()
            time.sleep(0.002)

    def _look(self) -> None:
        if self.path.exists():
            pids = [int(pid) for pid in self.path.read_text().split()]
            if pids and self.first is None:
                self.first = pids[0]
            self._seen.update(pids)
        for pid in self._seen - self.gone_at.keys():
            if not alive(pid):
                self.gone_at[pid] = time.time()

    @property
    def pids(self) -> set[int]:
        return set(self._seen)

    def all_gone(self, timeout: float = 10.0, *, but_the_child: bool = False) -> float | None:
        """When the last recorded process was seen gone (epoch seconds); None if none
        had to go. With `but_the_child`, the job's own child may live on (a reused one),
        without a process under it."""

        def must_go() -> set[int]:
            return self._seen - {self.first} if but_the_child else self._seen

        try:
            wait_for(lambda: self._seen and must_go() <= self.gone_at.keys(), timeout,
                     interval=0.01, message=f"processes {must_go() - self.gone_at.keys()}")
        finally:
            self._stop.set()
            self._thread.join()
        if but_the_child and self.first is not None and alive(self.first):
            assert psutil.Process(self.first).children() == []
        return max((self.gone_at[pid] for pid in must_go()), default=None)


@pytest.fixture
def jobs_per_child() -> int:
    """max_jobs_per_child of every hostile handler; some tests parametrize it."""
    return 1


@pytest.fixture
def hostile_pool(pool: Pool, jobs_per_child: int) -> Pool:
    handlers = HANDLERS if jobs_per_child == 1 else {
        name: {**options, "max_jobs_per_child": jobs_per_child}
        for name, options in HANDLERS.items()
    }
    pool.start(pool.config(handlers, capacity=4, lease_ttl=2, stop_grace=1))
    return pool


@pytest.fixture
def client(hostile_pool: Pool) -> Client:
    return hostile_pool.client()


def reason(record: dict[str, Any]) -> str:
    """The first line of the error; the lines after it are the traceback and output."""
    return str(record["error"]).split("\n")[0]


def run_hostile(
    pool: Pool,
    client: Client,
    handler: str,
    tmp_path: Path,
    payload: dict[str, Any] | None = None,
    *,
    then: Callable[[str, ProcessWatch], None] | None = None,
    processes: int = 1,
    reused: bool = False,
) -> dict[str, Any]:
    """Dispatch a hostile job, wait for its outcome and for its processes to be gone
    (with `reused`, its own child may stay, clean), then check that the supervisor
    still serves."""
    key = f"hostile-{handler}"
    watch = ProcessWatch(tmp_path / f"{handler}.pids")
    client.dispatch(key, {"pids": str(watch.path), **(payload or {})}, handler=handler)
    if then is not None:
        then(key, watch)
    record = wait_for(lambda: finished(client, key), 30, message=f"{key} to finish")
    last_gone = watch.all_gone(but_the_child=reused)
    assert len(watch.pids) >= processes, watch.pids
    cleanup = 0.0 if last_gone is None else last_gone - record["finished_at"]
    print(f"\n{handler} [{pool.store.split(':')[0]}]: {record['state']}, "
          f"{reason(record) if record['error'] else '-'}; cleanup {cleanup * 1000:.0f} ms")
    assert cleanup < CLEANUP_BOUND
    assert_still_serving(pool, client)
    return record


def assert_still_serving(pool: Pool, client: Client) -> None:
    assert all(process.process.poll() is None for process in pool.supervisors), pool.logs()
    key = f"normal-{time.monotonic_ns()}"
    client.dispatch(key, {"after": "hostile"}, handler="normal")
    record = wait_for(lambda: finished(client, key), 20, message="the next normal job")
    assert record["state"] == "succeeded", record


def wait_recorded(watch: ProcessWatch, count: int) -> None:
    wait_for(lambda: len(watch.pids) >= count, 20, message=f"{count} recorded pids")


# -- failures of the handler itself


@with_reused_children
def test_raises(
    hostile_pool: Pool, client: Client, tmp_path: Path, jobs_per_child: int
) -> None:
    record = run_hostile(hostile_pool, client, "raises", tmp_path, reused=jobs_per_child > 1)
    assert record["state"] == "failed"
    assert reason(record) == "RuntimeError: the handler gave up"


def test_segfaults(hostile_pool: Pool, client: Client, tmp_path: Path) -> None:
    record = run_hostile(hostile_pool, client, "segfault", tmp_path)
    assert record["state"] == "failed"
    assert reason(record) == "killed by signal SIGSEGV"


def test_returns_an_object(hostile_pool: Pool, client: Client, tmp_path: Path) -> None:
    record = run_hostile(hostile_pool, client, "unserializable", tmp_path)
    assert record["state"] == "failed"
    assert reason(record).startswith("result is not JSON-serializable: ")


def test_exits_without_a_result(hostile_pool: Pool, client: Client, tmp_path: Path) -> None:
    record = run_hostile(hostile_pool, client, "exits", tmp_path)
    assert record["state"] == "failed"
    assert reason(record) == "exited without a result (exit code 0)"


def test_closes_its_own_stdout(hostile_pool: Pool, client: Client, tmp_path: Path) -> None:
    record = run_hostile(hostile_pool, client, "closes_stdout", tmp_path)
    assert record["state"] == "succeeded", record
    assert record["result"] == {"ok": True}


def test_prints_100_mb(hostile_pool: Pool, client: Client, tmp_path: Path) -> None:
    record = run_hostile(hostile_pool, client, "prints", tmp_path)
    assert record["state"] == "succeeded", record
    print(f"printed 100 MB in {record['finished_at'] - record['started_at']:.1f} s")


# -- limits


@with_reused_children
def test_allocates_past_memory_limit(
    hostile_pool: Pool, client: Client, tmp_path: Path, jobs_per_child: int
) -> None:
    record = run_hostile(hostile_pool, client, "memory", tmp_path, reused=jobs_per_child > 1)
    assert record["state"] == "failed"
    match = re.fullmatch(r"memory limit 100 MiB exceeded \(peak (\d+(?:\.\d)?) MiB\)",
                         reason(record))
    assert match, record["error"]
    assert float(match[1]) < 200  # caught on its way to 300 MB


def test_burns_cpu_past_cpu_limit(hostile_pool: Pool, client: Client, tmp_path: Path) -> None:
    record = run_hostile(hostile_pool, client, "cpu", tmp_path, {"children": 1}, processes=2)
    assert record["state"] == "failed"
    assert reason(record) == "cpu limit 1 s exceeded"


def test_never_returns(hostile_pool: Pool, client: Client, tmp_path: Path) -> None:
    record = run_hostile(hostile_pool, client, "never_returns", tmp_path)
    assert record["state"] == "failed"
    assert reason(record) == "timeout after 2 s"


def test_ignores_sigterm_when_stopped(
    hostile_pool: Pool, client: Client, tmp_path: Path
) -> None:
    def stop(key: str, watch: ProcessWatch) -> None:
        wait_recorded(watch, 1)
        client.stop(key, timeout=20)

    record = run_hostile(hostile_pool, client, "ignores_sigterm", tmp_path, then=stop)
    assert record["state"] == "stopped"
    assert reason(record) == "stopped by request; did not stop within stop_grace, killed"
    assert record["finished_at"] - record["started_at"] >= 1.0  # the stop_grace


# -- processes that try to outlive their job


@with_reused_children
def test_grandchild_with_setsid_outliving_a_returned_handler(
    hostile_pool: Pool, client: Client, tmp_path: Path, jobs_per_child: int
) -> None:
    record = run_hostile(hostile_pool, client, "setsid_grandchild", tmp_path, processes=2,
                         reused=jobs_per_child > 1)
    assert record["state"] == "succeeded"


def test_double_forked_daemon_of_a_handler_that_times_out(
    hostile_pool: Pool, client: Client, tmp_path: Path
) -> None:
    record = run_hostile(hostile_pool, client, "daemon", tmp_path, processes=2)
    assert record["state"] == "failed"
    assert reason(record) == "timeout after 2 s"


def test_double_forked_daemon_of_a_stopped_handler(
    hostile_pool: Pool, client: Client, tmp_path: Path
) -> None:
    def stop(key: str, watch: ProcessWatch) -> None:
        wait_recorded(watch, 2)
        client.stop(key, timeout=20)

    record = run_hostile(
        hostile_pool, client, "daemon_untimed", tmp_path, then=stop, processes=2
    )
    assert record["state"] == "stopped"


@with_reused_children
def test_double_forked_daemon_of_a_fenced_handler(
    hostile_pool: Pool, client: Client, tmp_path: Path, jobs_per_child: int
) -> None:
    """The supervisor freezes past its lease: the fork server kills the job, and the
    daemon with it, without the supervisor."""
    watch = ProcessWatch(tmp_path / "fenced.pids")
    client.dispatch("fenced", {"pids": str(watch.path)}, handler="daemon_untimed")
    wait_recorded(watch, 2)
    supervisor = hostile_pool.supervisors[0]
    frozen_at = time.time()
    supervisor.signal(signal.SIGSTOP)
    try:
        last_gone = watch.all_gone()
    finally:
        supervisor.signal(signal.SIGCONT)
    assert last_gone is not None
    print(f"\nfenced [{hostile_pool.store.split(':')[0]}]: every process gone "
          f"{(last_gone - frozen_at) * 1000:.0f} ms after the freeze (lease_ttl 2 s)")
    assert last_gone - frozen_at < 2 + CLEANUP_BOUND
    client.stop("fenced", timeout=20)  # it may have been claimed again meanwhile
    assert_still_serving(hostile_pool, client)


# -- the supervisor's secrets


@pytest.fixture
def secret_pool(pool: Pool) -> Iterator[Pool]:
    """A supervisor with a secret, and the store URL, in its own environment."""
    config = pool.config(HANDLERS, capacity=2)
    process = SupervisorProcess(config, pool.directory / "supervisor-secret.log")
    process.start(env={"POOLSUP_TEST_SECRET": SECRET, "POOLSUP_STORE": pool.store,
                       "REDISCLI_AUTH": SECRET})
    pool.supervisors.append(process)
    process.wait_serving()
    yield pool


def test_reads_the_supervisors_secrets_from_its_environment(
    secret_pool: Pool, tmp_path: Path
) -> None:
    client = secret_pool.client()
    record = run_hostile(secret_pool, client, "snoops", tmp_path)
    assert record["state"] == "succeeded", record
    found = record["result"]
    assert found["environ"]["FROM_TABLE"] == "yes"
    assert found["environ"]["POOLSUP_JOB_KEY"] == "hostile-snoops"
    for place in ("environ", "posix_environ", "proc_environ", "fork_server_environ",
                  "cmdline"):
        text = str(found[place])
        assert SECRET not in text, place
        assert secret_pool.store not in text, place
        assert "POOLSUP_STORE" not in text, place
