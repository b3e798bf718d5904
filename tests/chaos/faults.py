"""Each fault of the plan as an episode against the real cluster: it injects the fault,
holds it for the planned duration, and heals it before it returns."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import psutil
import redis

from supervisor import Client
from tests.chaos.checker import Drain, Freeze, History, Kill
from tests.chaos.cluster import Cluster
from tests.chaos.ledger import now
from tests.chaos.plan import Fault
from tests.helpers.redis_server import free_port

DRAIN_WAIT = 60.0


class FaultInjector:
    def __init__(self, cluster: Cluster, history: History, client: Client,
                 log: Callable[[str], None]) -> None:
        self.cluster = cluster
        self.history = history
        self.client = client
        self.log = log
        self._store_faults = 0  # store fault episodes begun (lane 1 runs them alongside)
        self._store_fault_on = threading.Event()

    def inject(self, fault: Fault) -> None:
        if fault.target in self.cluster.ids and not self.cluster.running(fault.target):
            self.cluster.start_supervisor(fault.target)  # a heal: it must be up to be hit
        self.log(f"fault {fault.kind} {fault.target} {fault.duration}s")
        self.history.faults.append(fault.kind)
        if fault.target not in ("redis", "postgres"):
            getattr(self, fault.kind)(fault)
            return
        self._store_faults += 1
        self._store_fault_on.set()
        try:
            getattr(self, fault.kind)(fault)
        finally:
            self._store_fault_on.clear()

    def _drained(self, supervisor: str) -> Drain:
        faults_before, on_before = self._store_faults, self._store_fault_on.is_set()
        began = now()
        exit_code = self.cluster.drain(supervisor, DRAIN_WAIT)
        store_fault = (on_before or self._store_fault_on.is_set()
                       or self._store_faults != faults_before)
        return Drain(supervisor, exit_code, store_fault, began)

    def _held_keys(self, supervisor: str) -> tuple[str, ...]:
        try:
            return tuple(record["key"] for record in self.client.jobs("running")
                         if record["supervisor"] == supervisor)
        except Exception:  # the store is healthy between episodes; a miss only loses a count
            return ()

    def kill_supervisor(self, fault: Fault) -> None:
        keys = self._held_keys(fault.target)
        self.cluster.supervisors[fault.target].process.kill()
        self.history.kills.append(Kill(fault.target, now(), keys))
        self.cluster.supervisors[fault.target].process.wait(10)
        time.sleep(fault.duration)
        self.cluster.start_supervisor(fault.target)

    def freeze_supervisor(self, fault: Fault) -> None:
        process = self.cluster.supervisors[fault.target]
        self.history.freezes.append(Freeze(fault.target, now(), self._held_keys(fault.target)))
        process.signal(signal.SIGSTOP)
        try:
            time.sleep(fault.duration)
        finally:
            process.signal(signal.SIGCONT)

    def freeze_group(self, fault: Fault) -> None:
        group = self.cluster.supervisors[fault.target].pid  # a session leader: pgid == pid
        self.history.freezes.append(Freeze(fault.target, now(), self._held_keys(fault.target)))
        os.killpg(group, signal.SIGSTOP)
        try:
            time.sleep(fault.duration)
        finally:
            os.killpg(group, signal.SIGCONT)

    def kill_fork_server(self, fault: Fault) -> None:
        fork_server = self.cluster.fork_server(fault.target)
        if fork_server is None:
            self.log(f"no fork server under {fault.target}")
            return
        with contextlib.suppress(Exception):
            fork_server.kill()

    def drain(self, fault: Fault) -> None:
        self._drain_and_restart(fault.target)

    def _drain_and_restart(self, supervisor: str) -> None:
        self.history.drains.append(self._drained(supervisor))
        self.cluster.start_supervisor(supervisor)

    def rolling_restart(self, fault: Fault) -> None:
        for supervisor in self.cluster.ids:
            self._drain_and_restart(supervisor)

    def join_leave(self, fault: Fault) -> None:
        self.cluster.start_supervisor(fault.target)
        time.sleep(fault.duration)
        self.history.drains.append(self._drained(fault.target))

    def freeze_redis(self, fault: Fault) -> None:
        assert self.cluster.redis is not None
        self.cluster.redis.pause()
        try:
            time.sleep(fault.duration)
        finally:
            self.cluster.redis.resume()

    def restart_redis(self, fault: Fault) -> None:
        server = self.cluster.redis
        assert server is not None
        admin = self.cluster.admin()
        try:
            admin.shutdown()  # with appendfsync always, every write is on disk
        except Exception as error:  # redis-py may see the connection close
            self.log(f"shutdown: {error!r}")
        finally:
            admin.close()
        server.stop()
        time.sleep(fault.duration)
        server.start()

    def freeze_postgres(self, fault: Fault) -> None:
        frozen = self.cluster.postgres_processes()
        for process in frozen:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(signal.SIGSTOP)
        try:
            time.sleep(fault.duration)
        finally:
            for process in frozen:
                with contextlib.suppress(psutil.NoSuchProcess):
                    process.send_signal(signal.SIGCONT)

    def restart_postgres(self, fault: Fault) -> None:
        server = self.cluster.postgres
        assert server is not None
        # A crash of the server's processes (immediate: no checkpoint, crash recovery at
        # the start); with synchronous_commit on, every commit a caller saw is kept.
        server.stop("immediate")
        time.sleep(fault.duration)
        server.start()

    def refuse_postgres(self, fault: Fault) -> None:
        server = self.cluster.postgres
        assert server is not None
        server.psql("ALTER DATABASE pool WITH ALLOW_CONNECTIONS false", database="postgres")
        try:
            server.psql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = 'pool'", database="postgres")
            time.sleep(fault.duration)
        finally:
            server.psql("ALTER DATABASE pool WITH ALLOW_CONNECTIONS true", database="postgres")

    def failover(self, fault: Fault) -> None:
        self._kill_master(lose_writes_for=None)

    def lose_writes(self, fault: Fault) -> None:
        self._kill_master(lose_writes_for=fault.duration)

    def _kill_master(self, lose_writes_for: float | None) -> None:
        """SIGKILL the master behind Sentinel and wait for the replica's promotion; with
        `lose_writes_for`, the replica is first cut off (frozen, its link dropped) for
        that long, so that the master's last writes never reach it.  The old master comes
        back, empty, as a replica of the new one."""
        setup = self.cluster.sentinel
        assert setup is not None
        master, replica = setup.current_master(), setup.replica_of_master()
        assert master is not None and replica is not None
        if lose_writes_for is not None:
            replica.pause()
            with contextlib.suppress(Exception):
                admin = redis.Redis(port=master.port, socket_timeout=5)
                try:
                    admin.client_kill_filter(_type="replica")
                finally:
                    admin.close()
            time.sleep(lose_writes_for)
        os.kill(master.pid, signal.SIGKILL)
        replica.resume()
        promoted = setup.wait_failover(master, timeout=60)
        self.log(f"master {master.port} -> {promoted.port}")
        setup.restart_as_replica(master, promoted)

    def redis_oom(self, fault: Fault) -> None:
        self._redis_errors(fault, lambda admin: admin.config_set("maxmemory", 1),
                           lambda admin: admin.config_set("maxmemory", 0))

    def redis_readonly(self, fault: Fault) -> None:
        dead_port = free_port()
        self._redis_errors(fault, lambda admin: admin.replicaof("127.0.0.1", dead_port),
                           lambda admin: admin.replicaof("NO", "ONE"))

    def _redis_errors(self, fault: Fault, inject: Callable[[Any], Any],
                      heal: Callable[[Any], Any]) -> None:
        admin = self.cluster.admin()
        try:
            admin.config_set("maxmemory-policy", "noeviction")
            inject(admin)
            time.sleep(fault.duration)
        finally:
            heal(admin)
            admin.close()
