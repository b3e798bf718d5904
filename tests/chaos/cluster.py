"""The pool under chaos: a durable redis-server (or one SQLite file, or a master and a
replica behind three sentinels, with wait_replicas = 1, or a PostgreSQL server with
synchronous_commit on) and real `poolsup run`
processes, each in a session of its own so that its whole process group can be frozen
without touching the driver."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import redis

from tests.chaos.checker import LIMITED, LIMITED_MAX_RUNNING
from tests.chaos.plan import supervisor_ids
from tests.helpers.pool import SupervisorProcess, write_pool
from tests.helpers.postgres_server import PostgresServer
from tests.helpers.redis_sentinel import SentinelSetup
from tests.helpers.redis_server import RedisServer

LEASE_TTL = 2
DRAIN_TIMEOUT = 2
STOP_GRACE = 2
CAPACITY = 4
SERVE_WITHIN = 120  # seconds a started supervisor gets to register and serve
DURABLE_REDIS = ("--appendonly", "yes", "--appendfsync", "always")
# Every supervisor fires this schedule; each tick dispatches one short job (check 7).
TICK_SCHEDULE = "chaos_tick"
TICK_EVERY = 2
SHARED = 4  # child_concurrency of the async handlers


def handlers(reuse: int = 1) -> dict[str, dict[str, Any]]:
    """The run's handlers; with `reuse` > 1, all but the long one run up to that many jobs
    per child (max_jobs_per_child: a reused child gets its jobs on its own channel)."""
    def job(function: str, **options: Any) -> dict[str, Any]:
        reused = {"max_jobs_per_child": reuse} if reuse > 1 else {}
        return {"path": "chaos_jobs.py", "function": function, **reused, **options}

    def shared(function: str, **options: Any) -> dict[str, Any]:
        return {"path": "chaos_jobs.py", "function": function,
                "child_concurrency": SHARED, **options}

    return {
        "short": job("short", timeout=30, max_attempts=5),
        "cpu": job("cpu", timeout=30, max_attempts=5),
        "failing": job("failing", timeout=30, max_attempts=2),
        "fail_for_good": job("fail_for_good", timeout=30, max_attempts=3),
        "stoppable": job("stoppable", timeout=0, rebalance=False, max_attempts=5),
        "checkpointing": job("checkpointing", timeout=60, max_attempts=10),
        "long": job("long_running", timeout=0, max_attempts=100, max_jobs_per_child=1),
        LIMITED: job("short", timeout=30, max_attempts=5, max_running=LIMITED_MAX_RUNNING),
        # Shared async children: up to SHARED jobs of each at once in one child.
        "async": shared("async_short", timeout=30, max_attempts=5),
        "async_stoppable": shared("async_stoppable", timeout=0, rebalance=False,
                                  max_attempts=5),
    }


class Cluster:
    def __init__(self, directory: Path, *, store: str, pool: str, supervisors: int = 3,
                 reuse: int = 1) -> None:
        self.ids, self.joiner = supervisor_ids(supervisors)
        self.reuse = reuse
        self.directory = directory
        self.pool = pool
        self.redis = RedisServer(args=DURABLE_REDIS) if store == "redis" else None
        self.sentinel = SentinelSetup() if store == "sentinel" else None
        self.postgres = PostgresServer(settings={"synchronous_commit": "on"}) \
            if store == "postgres" else None
        self.store_kind = store
        # Behind Sentinel, what a dispatch returned survives a failover only with this.
        self.wait_replicas = 1 if store == "sentinel" else 0
        self.supervisors: dict[str, SupervisorProcess] = {}
        self._starts: dict[str, int] = {}

    @property
    def store(self) -> str:
        if self.redis is not None:
            return self.redis.url
        if self.sentinel is not None:
            return self.sentinel.url
        if self.postgres is not None:
            return self.postgres.url
        return f"sqlite:///{self.directory}/pool.db"

    def config(self, supervisor: str) -> Path:
        path = write_pool(self.directory, store=self.store, pool=self.pool,
                          handlers=handlers(self.reuse),
                          name=f"{supervisor}.toml", id=supervisor, capacity=CAPACITY,
                          lease_ttl=LEASE_TTL, drain_timeout=DRAIN_TIMEOUT,
                          stop_grace=STOP_GRACE)
        ledger = self.directory / "ledger.jsonl"
        text = path.read_text()
        text = text.replace("[pool]\n", f"[pool]\nwait_replicas = {self.wait_replicas}\n", 1)
        path.write_text(text + f"""
[schedules.{TICK_SCHEDULE}]
every = {TICK_EVERY}
handler = "short"
key = "tick-{{tick}}"
payload = {{ledger = "{ledger}", seconds = 0.05}}
""")
        return path

    def start(self) -> None:
        if self.redis is not None:
            self.redis.start()
        if self.sentinel is not None:
            self.sentinel.start()
        if self.postgres is not None:
            self.postgres.start()
        for supervisor in self.ids:
            self.start_supervisor(supervisor)

    def start_supervisor(self, supervisor: str) -> SupervisorProcess:
        # A log of its own per start: "serving pool" from an earlier instance must not
        # count as this one's.
        self._starts[supervisor] = self._starts.get(supervisor, 0) + 1
        log = self.directory / f"supervisor-{supervisor}-{self._starts[supervisor]}.log"
        process = SupervisorProcess(self.config(supervisor), log)
        process.start(new_session=True)
        self.supervisors[supervisor] = process
        # A start registers with the store: under --overlap, Redis faults one after
        # another can keep refusing that for tens of seconds.
        return process.wait_serving(SERVE_WITHIN)

    def running(self, supervisor: str) -> bool:
        process = self.supervisors.get(supervisor)
        return process is not None and process.process.poll() is None

    def fork_server(self, supervisor: str) -> psutil.Process | None:
        with contextlib.suppress(psutil.NoSuchProcess):
            for child in psutil.Process(self.supervisors[supervisor].pid).children():
                with contextlib.suppress(psutil.NoSuchProcess):
                    if "sandbox.forkserver" in " ".join(child.cmdline()):
                        return child
        return None

    def postgres_processes(self) -> list[psutil.Process]:
        """The PostgreSQL server's postmaster and all its children."""
        assert self.postgres is not None
        pid_file = self.postgres.data / "postmaster.pid"
        with contextlib.suppress(OSError, ValueError, psutil.NoSuchProcess):
            postmaster = psutil.Process(int(pid_file.read_text().split()[0]))
            return [postmaster, *postmaster.children(recursive=True)]
        return []

    def admin(self) -> redis.Redis:
        assert self.redis is not None
        return redis.Redis(port=self.redis.port, socket_timeout=5)

    def drain(self, supervisor: str, timeout: float = 60.0) -> int | None:
        """SIGTERM and wait: the exit code, or None if it did not exit in time (then it
        is killed)."""
        process = self.supervisors[supervisor]
        process.signal(signal.SIGTERM)
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            return None

    def heal(self) -> None:
        """Undo whatever fault may still hold: thaw, bring redis back clean, restart the
        supervisors that are down."""
        if self.redis is not None:
            with contextlib.suppress(AssertionError, ProcessLookupError):
                self.redis.resume()
            if self.redis._process is None or self.redis._process.poll() is not None:
                self.redis.start()
            admin = self.admin()
            try:
                admin.config_set("maxmemory", 0)
                admin.replicaof("NO", "ONE")
            finally:
                admin.close()
        if self.sentinel is not None:
            self.heal_sentinel()
        if self.postgres is not None:
            for server_process in self.postgres_processes():
                with contextlib.suppress(psutil.NoSuchProcess):
                    server_process.send_signal(signal.SIGCONT)
            if not (self.postgres.data / "postmaster.pid").exists():
                self.postgres.start()
            self.postgres.psql("ALTER DATABASE pool WITH ALLOW_CONNECTIONS true",
                               database="postgres")
        for supervisor, process in self.supervisors.items():
            if process.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGCONT)
            elif supervisor in self.ids:
                self.start_supervisor(supervisor)

    def heal_sentinel(self) -> None:
        """Thaw every server, and bring a dead one back as a replica of the master."""
        assert self.sentinel is not None
        for server in self.sentinel.servers:
            if server.running:
                server.resume()
        wait_until(lambda: self.sentinel is not None and (
            (master := self.sentinel.current_master()) is not None and master.running), 60)
        master = self.sentinel.current_master()
        assert master is not None
        for server in self.sentinel.servers:
            if not server.running:
                self.sentinel.restart_as_replica(server, master)

    def poolsup(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """The `poolsup` command line, as a user runs it, against this pool."""
        return subprocess.run(
            [sys.executable, "-m", "supervisor.cli", *args[:1], "-c",
             str(self.directory / f"{self.ids[0]}.toml"), *args[1:]],
            capture_output=True, text=True, timeout=timeout, check=False)

    def close(self) -> None:
        for process in self.supervisors.values():
            with contextlib.suppress(ProcessLookupError):
                if process.process.poll() is None:
                    os.killpg(process.pid, signal.SIGCONT)
            process.kill()
        if self.redis is not None:
            self.redis.remove()
        if self.sentinel is not None:
            self.sentinel.remove()
        if self.postgres is not None:
            # The server's own log stays with the run's files (it goes with its data).
            with contextlib.suppress(OSError):
                shutil.copy(self.postgres.log, self.directory / "postgres.log")
            self.postgres.remove()


def wait_until(predicate: Any, timeout: float, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())
