"""A real, throwaway Redis behind Sentinel for tests: a master, a replica and three
sentinels on free ports, localhost only, quick to fail over; optionally all of them
speaking TLS only (each requiring client certificates), and sentinels that require a
password of their own."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import quote, urlencode

from tests.helpers.redis_server import RedisServer, TlsFiles, free_port

MASTER_NAME = "poolsup"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 3000
START_TIMEOUT = 20.0


class SentinelSetup:
    """`master` and `replica` (a `--replicaof` of it), watched by three sentinels
    (quorum 2).  After a failover the roles swap: `current_master()` asks a sentinel.

    With `tls`, every process listens for TLS only (`--port 0`, a `tls-port`) and
    requires client certificates; replication and the sentinels' own connections (to
    the servers and to each other) go over TLS too (`tls-replication yes`), and `url` is
    a rediss+sentinel:// URL with the client's files.  With `sentinel_password`, the
    sentinels require it (`requirepass`, which they also use with each other) and
    `url` carries it as `sentinel_password`.  With a `host` name (such as "localhost",
    for certificates that name hosts rather than addresses), the sentinels name the
    servers and each other by it (`resolve-hostnames`, `announce-hostnames`,
    `replica-announce-ip`), and `url` names the sentinels by it."""

    def __init__(self, replicas: int = 1, *, tls: TlsFiles | None = None,
                 sentinel_password: str | None = None, host: str = "127.0.0.1") -> None:
        self.tls = tls
        self.sentinel_password = sentinel_password
        self.host = host
        quick = ("--repl-diskless-sync-delay", "0",
                 *(("--tls-replication", "yes") if tls is not None else ()),
                 *(("--replica-announce-ip", host) if host != "127.0.0.1" else ()))
        self.master = RedisServer(tls=tls, args=quick)
        self.replicas = [RedisServer(tls=tls, args=(*quick, "--replicaof", "127.0.0.1",
                                                    str(self.master.port)))
                         for _ in range(replicas)]
        self.sentinel_ports = [free_port() for _ in range(3)]
        self._dir = Path(tempfile.mkdtemp(prefix="poolsup-sentinel-"))
        self._sentinels: list[subprocess.Popen[bytes]] = []

    @property
    def replica(self) -> RedisServer:
        return self.replicas[0]

    @property
    def servers(self) -> list[RedisServer]:
        return [self.master, *self.replicas]

    @property
    def url(self) -> str:
        return self.url_with()

    def url_with(self, **options: str) -> str:
        """The store URL, with `options` added to (or, set to "", removed from) its query."""
        hosts = ",".join(f"{self.host}:{port}" for port in self.sentinel_ports)
        query: dict[str, str] = {}
        if self.tls is not None:
            query |= {"ssl_ca_certs": str(self.tls.ca), "ssl_certfile": str(self.tls.client_cert),
                      "ssl_keyfile": str(self.tls.client_key)}
        if self.sentinel_password is not None:
            query["sentinel_password"] = self.sentinel_password
        query = {name: value for name, value in (query | options).items() if value}
        scheme = "redis+sentinel" if self.tls is None else "rediss+sentinel"
        return (f"{scheme}://{hosts}/{MASTER_NAME}/0"
                + (f"?{urlencode(query, quote_via=quote)}" if query else ""))

    def cli(self, port: int, *args: str) -> str:
        """redis-cli on one of this setup's servers or sentinels (over TLS if it has it)."""
        password = self.sentinel_password if port in self.sentinel_ports else None
        return cli(port, *args, tls=self.tls, password=password)

    def start(self) -> SentinelSetup:
        try:
            self.master.start()
            for replica in self.replicas:
                replica.start()
            self._wait(lambda: all("master_link_status:up" in self.cli(r.port, "INFO",
                                                                       "replication")
                                   for r in self.replicas), "the replicas to sync")
            for n, port in enumerate(self.sentinel_ports):
                conf = self._dir / f"sentinel-{n}.conf"
                conf.write_text(
                    f"{self._listen_conf(port)}bind 127.0.0.1\ndir {self._dir}\n"
                    f"sentinel monitor {MASTER_NAME} {self.host} {self.master.port} 2\n"
                    f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n"
                    f"sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n"
                    f"sentinel parallel-syncs {MASTER_NAME} 1\n")
                self._sentinels.append(subprocess.Popen(
                    ["redis-server", str(conf), "--sentinel"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            self._wait(self._sentinels_see_all, "the sentinels to see each other")
        except BaseException:
            self.remove()
            raise
        return self

    def _listen_conf(self, port: int) -> str:
        """A sentinel's lines for where it listens, how it reaches the servers and its
        peers, and what its clients must present."""
        lines = [f"port {port}"]
        if self.tls is not None:
            lines = ["port 0", f"tls-port {port}", f"tls-cert-file {self.tls.server_cert}",
                     f"tls-key-file {self.tls.server_key}",
                     f"tls-ca-cert-file {self.tls.ca}", "tls-auth-clients yes",
                     "tls-replication yes"]
        if self.sentinel_password is not None:
            lines.append(f"requirepass {self.sentinel_password}")
        if self.host != "127.0.0.1":
            lines += ["sentinel resolve-hostnames yes", "sentinel announce-hostnames yes",
                      f"sentinel announce-ip {self.host}"]
        return "".join(f"{line}\n" for line in lines)

    def _sentinels_see_all(self) -> bool:
        for port in self.sentinel_ports:
            try:
                info = self.cli(port, "SENTINEL", "MASTER", MASTER_NAME)
            except subprocess.CalledProcessError:
                return False
            fields = info.split("\n")
            values = dict(zip(fields[::2], fields[1::2], strict=False))
            if (int(values.get("num-other-sentinels", 0)) < 2
                    or int(values.get("num-slaves", 0)) < len(self.replicas)):
                return False
        return True

    def current_master(self) -> RedisServer | None:
        """The server a sentinel names as master now."""
        for port in self.sentinel_ports:
            try:
                host_port = self.cli(port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME",
                                     MASTER_NAME).split()
            except subprocess.CalledProcessError:
                continue
            if len(host_port) == 2:
                return next((s for s in self.servers if s.port == int(host_port[1])), None)
        return None

    def wait_failover(self, old: RedisServer, timeout: float = 20.0) -> RedisServer:
        """Wait until another server is master (by ROLE and by the sentinels)."""
        found: list[RedisServer] = []

        def promoted() -> bool:
            master = self.current_master()
            if master is None or master is old:
                return False
            if not self.cli(master.port, "ROLE").startswith("master"):
                return False
            found.append(master)
            return True

        self._wait(promoted, "a replica to be promoted", timeout)
        return found[-1]

    def replica_of_master(self) -> RedisServer | None:
        """A running server other than the current master."""
        master = self.current_master()
        return next((s for s in self.servers if s is not master and s.running), None)

    def restart_as_replica(self, server: RedisServer, master: RedisServer) -> None:
        """Start `server` (killed) again, empty, as a replica of `master`; wait for sync."""
        server.stop()
        server.args = ("--repl-diskless-sync-delay", "0",
                       *(("--tls-replication", "yes") if self.tls is not None else ()),
                       *(("--replica-announce-ip", self.host) if self.host != "127.0.0.1"
                         else ()),
                       "--replicaof", "127.0.0.1", str(master.port))
        server.start()
        self._wait(lambda: "master_link_status:up" in self.cli(server.port, "INFO",
                                                               "replication"),
                   "the restarted server to sync")

    def _wait(self, condition, what: str, timeout: float = START_TIMEOUT) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while True:
            try:
                if condition():
                    return
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            time.sleep(0.05)

    def remove(self) -> None:
        for process in self._sentinels:
            process.kill()
            process.wait()
        self._sentinels.clear()
        for server in self.servers:
            server.remove()
        shutil.rmtree(self._dir, ignore_errors=True)  # the sentinels' configs and state


def cli(port: int, *args: str, tls: TlsFiles | None = None,
        password: str | None = None) -> str:
    """redis-cli on 127.0.0.1:`port`; with `tls`, over TLS with the client's files."""
    options = ["-p", str(port)]
    if tls is not None:
        options += ["--tls", "--cacert", str(tls.ca), "--cert", str(tls.client_cert),
                    "--key", str(tls.client_key)]
    if password is not None:
        options += ["--no-auth-warning", "-a", password]
    return subprocess.run(["redis-cli", *options, *args], check=True,
                          capture_output=True, text=True, timeout=5).stdout
