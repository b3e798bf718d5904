"""A real, throwaway `redis-server` for tests: no persistence, localhost only."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlencode

START_TIMEOUT = 10.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass(frozen=True)
class TlsFiles:
    """PEM files for a TLS server that also checks its clients' certificates.
    `server_name`: a name the server's certificate is valid for (to check it by)."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    server_name: str = "127.0.0.1"

    def client_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.ca)
        context.load_cert_chain(self.client_cert, self.client_key)
        return context


def answers_ping(
    port: int, password: str | None = None, *, username: str | None = None,
    tls: TlsFiles | None = None,
) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as raw:
            if tls is None:
                return _ping(raw, password, username)
            context = tls.client_context()
            with context.wrap_socket(raw, server_hostname=tls.server_name) as conn:
                return _ping(conn, password, username)
    except OSError:
        return False


def _ping(conn: socket.socket, password: str | None, username: str | None) -> bool:
    if password is not None:
        auth = f"AUTH {username} {password}" if username else f"AUTH {password}"
        conn.sendall(f"{auth}\r\n".encode())
        if not conn.recv(64).startswith(b"+OK"):
            return False
    conn.sendall(b"PING\r\n")
    return conn.recv(64).startswith(b"+PONG")


class RedisServer:
    """One redis-server process.  `start()` again after `stop()` reuses the port, so
    clients can reconnect to the same URL.  With a `password`, it requires one
    (`--requirepass`, or the ACL user `username` that `args` must create), and `url`
    carries it.  With `tls`, it listens only for TLS and requires client certificates;
    `url` is a rediss:// URL with the client's files.  `args` go to redis-server as
    they are."""

    def __init__(
        self, port: int | None = None, *, password: str | None = None,
        username: str | None = None, tls: TlsFiles | None = None, args: Sequence[str] = (),
        cluster_bus: bool = False,
    ) -> None:
        self.port = port or free_port()
        # A cluster node's bus port is set apart: its default, port + 10000, may be past 65535.
        self.cluster_port = free_port() if cluster_bus else None
        # A port picked here may be taken by another test's process before the server
        # binds it: its first start then tries another (a restart keeps its port).
        self._port_picked = port is None
        self._started = False
        self.password = password
        self.username = username
        self.tls = tls
        self.args = tuple(args)
        self._process: subprocess.Popen[bytes] | None = None
        self._dir: Path | None = None

    @property
    def url(self) -> str:
        return self.url_as(self.username, self.password)

    def url_as(self, username: str | None, password: str | None) -> str:
        """The server's URL with other credentials."""
        auth = ""
        if password is not None:
            auth = f"{quote(username or '', safe='')}:{quote(password, safe='')}@"
        if self.tls is None:
            return f"redis://{auth}127.0.0.1:{self.port}/0"
        files = {"ssl_ca_certs": self.tls.ca, "ssl_certfile": self.tls.client_cert,
                 "ssl_keyfile": self.tls.client_key}
        return f"rediss://{auth}127.0.0.1:{self.port}/0?{urlencode(files)}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int:
        assert self._process is not None, "the server is not running"
        return self._process.pid

    def start(self, *, tries: int = 3) -> RedisServer:
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="poolsup-redis-"))
        self._process = subprocess.Popen(
            ["redis-server", *self._listen_args(), "--save", "", "--appendonly", "no",
             "--bind", "127.0.0.1", "--dir", str(self._dir),
             *(["--requirepass", self.password]
               if self.password is not None and self.username is None else []),
             *self.args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + START_TIMEOUT
        while not answers_ping(self.port, self.password, username=self.username, tls=self.tls):
            exited = self._process.poll() is not None
            if exited or time.monotonic() > deadline:
                self.stop()
                if exited and self._port_picked and not self._started and tries > 1:
                    self.port = free_port()
                    if self.cluster_port is not None:
                        self.cluster_port = free_port()
                    return self.start(tries=tries - 1)
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.02)
        self._started = True
        return self

    def _listen_args(self) -> list[str]:
        bus = [] if self.cluster_port is None else ["--cluster-port", str(self.cluster_port)]
        if self.tls is None:
            return ["--port", str(self.port), *bus]
        return ["--port", "0", "--tls-port", str(self.port),
                "--tls-cert-file", str(self.tls.server_cert),
                "--tls-key-file", str(self.tls.server_key),
                "--tls-ca-cert-file", str(self.tls.ca), "--tls-auth-clients", "yes", *bus]

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): connections stay open and nothing answers."""
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGCONT)  # a paused server cannot act on SIGTERM
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def remove(self) -> None:
        """Stop the server and delete its directory."""
        self.stop()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
