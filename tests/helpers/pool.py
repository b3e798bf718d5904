"""Real supervisor processes and pool configs for integration tests."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

HANDLERS_DIR = Path(__file__).resolve().parent.parent / "handlers"


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key} = {toml_value(item)}" for key, item in value.items()) + "}"
    return str(value)


def write_pool(
    directory: Path,
    *,
    store: str,
    pool: str,
    handlers: dict[str, dict[str, Any]],
    name: str = "pool.toml",
    pool_options: dict[str, Any] | None = None,
    **supervisor: Any,
) -> Path:
    """Write a pool.toml; handler `path`s default to files in tests/handlers;
    `pool_options` go to [pool]."""
    lines = ["[pool]", f"name = {toml_value(pool)}", f"store = {toml_value(store)}"]
    lines += [f"{key} = {toml_value(value)}" for key, value in (pool_options or {}).items()]
    lines.append("")
    lines.append("[supervisor]")
    for key, value in supervisor.items():
        lines.append(f"{key} = {toml_value(value)}")
    for handler, options in handlers.items():
        lines += ["", f"[handlers.{handler}]"]
        for key, value in options.items():
            if key == "path" and not os.path.isabs(value):
                value = str(HANDLERS_DIR / value)
            lines.append(f"{key} = {toml_value(value)}")
    path = directory / name
    path.write_text("\n".join(lines) + "\n")
    return path


def wait_for(predicate: Callable[[], Any], timeout: float, interval: float = 0.05,
             message: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {message}")
        time.sleep(interval)


@dataclass
class SupervisorProcess:
    """`poolsup run` in a real process, logging to a file."""

    config: Path
    log_path: Path
    process: subprocess.Popen[bytes] = field(init=False)

    def start(
        self, env: dict[str, str] | None = None, *, new_session: bool = False,
        args: tuple[str, ...] = (),
    ) -> SupervisorProcess:
        """With `new_session`, in a session and process group of its own, as a shell
        starts a job: `os.killpg(self.pid, ...)` then reaches the whole group.  `args`
        go after `poolsup run -c CONFIG`."""
        log_file = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "supervisor.cli", "run", "-c", str(self.config), *args],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            start_new_session=new_session,
        )
        log_file.close()
        return self

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_serving(self, timeout: float = 20.0) -> SupervisorProcess:
        wait_for(lambda: "serving pool" in self.log() or self.process.poll() is not None,
                 timeout, message="supervisor to serve")
        assert self.process.poll() is None, f"supervisor exited:\n{self.log()}"
        return self

    def signal(self, signum: int) -> None:
        os.kill(self.process.pid, signum)

    def wait(self, timeout: float = 60.0) -> int:
        return self.process.wait(timeout)

    def kill(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGCONT)
            self.process.kill()
            self.process.wait(10)


@dataclass(frozen=True)
class LedgerLine:
    key: str
    token: int
    pid: int
    at: float


def read_ledger(path: Path) -> list[LedgerLine]:
    if not path.exists():
        return []
    lines = []
    for raw in path.read_text().splitlines():
        parts = raw.split()
        if len(parts) == 4:
            lines.append(LedgerLine(parts[0], int(parts[1]), int(parts[2]), float(parts[3])))
    return lines


def lifetimes(ledger: list[LedgerLine]) -> dict[str, list[tuple[int, int, float, float]]]:
    """Per key: (pid, token, first, last) of each process, in order of first sight."""
    spans: dict[tuple[str, int], list[Any]] = {}
    for line in ledger:
        span = spans.setdefault((line.key, line.pid), [line.pid, line.token, line.at, line.at])
        span[2] = min(span[2], line.at)
        span[3] = max(span[3], line.at)
    by_key: dict[str, list[tuple[int, int, float, float]]] = {}
    for (key, _pid), span in spans.items():
        by_key.setdefault(key, []).append(tuple(span))  # type: ignore[arg-type]
    for spans_of_key in by_key.values():
        spans_of_key.sort(key=lambda span: span[2])
    return by_key


def assert_one_process_at_a_time(ledger: list[LedgerLine]) -> None:
    """No two processes of one key were ever seen alive at overlapping times."""
    for key, spans in lifetimes(ledger).items():
        for earlier, later in itertools.pairwise(spans):
            assert earlier[3] < later[2], (
                f"key {key}: pid {earlier[0]} (token {earlier[1]}) was alive until "
                f"{earlier[3]:.3f}, after pid {later[0]} (token {later[1]}) started at "
                f"{later[2]:.3f}"
            )


FINISHED = ("succeeded", "failed", "stopped")


def finished(client: Any, key: str) -> dict[str, Any] | None:
    """The job's record once it has ended, else None (for `wait_for`)."""
    record: dict[str, Any] = client.job(key)
    return record if record["state"] in FINISHED else None


def fork_server_of(supervisor: SupervisorProcess) -> psutil.Process:
    """The supervisor's current fork server process."""
    for child in psutil.Process(supervisor.pid).children():
        with contextlib.suppress(psutil.NoSuchProcess):
            if "sandbox.forkserver" in child.cmdline():
                return child
    raise AssertionError("no fork server")
