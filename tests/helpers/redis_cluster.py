"""A real, throwaway Redis Cluster for tests: three primaries (with a replica each if
asked), localhost."""

from __future__ import annotations

import subprocess
import time

from tests.helpers.redis_server import RedisServer

START_TIMEOUT = 30.0
NODE_TIMEOUT_MS = 2000


class RedisClusterNodes:
    """Three `redis-server --cluster-enabled yes` processes joined into one cluster with
    `redis-cli --cluster create`, each slot served by one of them."""

    def __init__(self, size: int = 3, *, replicas: int = 0,
                 node_timeout_ms: int = NODE_TIMEOUT_MS) -> None:
        self.replicas = replicas
        self.nodes = [
            RedisServer(args=("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                              "--cluster-node-timeout", str(node_timeout_ms),
                              "--repl-diskless-sync-delay", "0"), cluster_bus=True)
            for _ in range(size * (1 + replicas))
        ]

    @property
    def url(self) -> str:
        """The store URL: any one node is enough, the client finds the others."""
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    def start(self) -> RedisClusterNodes:
        try:
            for node in self.nodes:
                node.start()
            subprocess.run(
                ["redis-cli", "--cluster", "create",
                 *(f"127.0.0.1:{node.port}" for node in self.nodes),
                 "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                check=True, capture_output=True, timeout=START_TIMEOUT,
            )
            self._wait_until_ok()
        except BaseException:
            self.remove()
            raise
        return self

    def cli(self, port: int, *args: str) -> str:
        return subprocess.run(
            ["redis-cli", "-p", str(port), *args],
            check=True, capture_output=True, text=True, timeout=10,
        ).stdout

    def master_and_replica_of(self, key: str) -> tuple[RedisServer, RedisServer]:
        """The node serving `key`'s slot, and a replica of it (once the node asked has
        heard of that replica: a new cluster's gossip may not have told it yet)."""
        deadline = time.monotonic() + START_TIMEOUT
        while (pair := self._master_and_replica_of(key)) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no replica of the node serving {key!r}")
            time.sleep(0.05)
        return pair

    def _master_and_replica_of(self, key: str) -> tuple[RedisServer, RedisServer] | None:
        port = self.nodes[0].port
        slot = int(self.cli(port, "CLUSTER", "KEYSLOT", key))
        ids: dict[str, RedisServer] = {}
        master_id, replica_of = "", {}
        for line in self.cli(port, "CLUSTER", "NODES").splitlines():
            fields = line.split()
            node = next(n for n in self.nodes if f":{n.port}@" in fields[1])
            ids[fields[0]] = node
            if "master" in fields[2] and any(_covers(r, slot) for r in fields[8:]):
                master_id = fields[0]
            if "slave" in fields[2]:
                replica_of[fields[3]] = node
        if master_id not in replica_of:
            return None
        return ids[master_id], replica_of[master_id]

    def _replicas_in_sync(self) -> bool:
        for node in self.nodes:
            info = self.cli(node.port, "INFO", "replication")
            if "role:slave" in info and "master_link_status:up" not in info:
                return False
        return True

    def _wait_until_ok(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not all("cluster_state:ok" in self.cli(node.port, "CLUSTER", "INFO")
                      for node in self.nodes) or not self._replicas_in_sync():
            if time.monotonic() > deadline:
                raise RuntimeError("the test cluster did not reach cluster_state:ok")
            time.sleep(0.05)

    def remove(self) -> None:
        for node in self.nodes:
            node.remove()


def _covers(slots: str, slot: int) -> bool:
    low, _, high = slots.partition("-")
    return low.isdigit() and int(low) <= slot <= int(high or low)
