"""`poolsup web`: where the dashboard listens, its token, and serving it with uvicorn on
anyio until SIGTERM or SIGINT."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import uvicorn
from starlette.applications import Starlette

from supervisor.client import client_for
from supervisor.config import Config
from supervisor.errors import ConfigError, PoolsupError, UsageError
from supervisor.web.app import DashboardSettings, create_app
from supervisor.web.auth import is_loopback

TOKEN_ENV = "POOLSUP_WEB_TOKEN"


def parse_listen(text: str) -> tuple[str, int]:
    """"host:port" (an IPv6 host in brackets) -> (host, port)."""
    host, colon, port = text.rpartition(":")
    host = host.strip("[]") if host.startswith("[") else host
    if not colon or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageError(f"--listen {text!r}: expected HOST:PORT, e.g. 127.0.0.1:8080")
    return host, int(port)


def read_token(token_file: str | None) -> str | None:
    """The token from `token_file`, else from $POOLSUP_WEB_TOKEN, else None."""
    if token_file is None:
        return os.environ.get(TOKEN_ENV) or None
    try:
        token = Path(token_file).read_text().strip()
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"--token-file {token_file}: cannot read it ({error})") from None
    if not token:
        raise ConfigError(f"--token-file {token_file}: the file is empty")
    return token


def check_exposure(host: str, token: str | None) -> None:
    if token is None and not is_loopback(host):
        raise UsageError(f"--listen {host}: not a loopback address; a dashboard reachable "
                         f"from other hosts needs a token (--token-file F or {TOKEN_ENV})")


def bound_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family)
    except OSError as error:
        raise PoolsupError(f"--listen {host}:{port}: cannot listen there ({error})") from None


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: `serve` stops it on our signals, so that
    it does not raise the signal again once it has shut down (which would end the
    process by the signal, not with exit 0)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve(app: Starlette, sock: socket.socket) -> None:
    server = _Server(uvicorn.Config(app, lifespan="on", log_level="warning",
                                    access_log=False))

    async def stop_on_signal() -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                server.should_exit = True
                return

    async with anyio.create_task_group() as group:
        group.start_soon(stop_on_signal)
        await server.serve(sockets=[sock])
        group.cancel_scope.cancel()


def run_dashboard(config: Config, *, listen: str, token_file: str | None,
                  read_only: bool) -> None:
    host, port = parse_listen(listen)
    token = read_token(token_file)
    check_exposure(host, token)
    sock = bound_socket(host, port)
    settings = DashboardSettings(pool=config.pool.name, handlers=sorted(config.handlers),
                                 token=token, read_only=read_only)
    app = create_app(client_for(config), settings)
    shown_host = f"[{host}]" if ":" in host else host
    print(f"poolsup web: http://{shown_host}:{sock.getsockname()[1]}/ (pool {config.pool.name}"
          f"{', read-only' if read_only else ''}{', token required' if token else ''})",
          flush=True)
    anyio.run(serve, app, sock)
    sys.stdout.flush()
