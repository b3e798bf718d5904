"""Guarantee 11, sandboxed jobs: hostile handlers in "default" and "strict", through a real
supervisor, on Redis and SQLite. Each attempt is refused inside the job (the job fails with the
kernel's EPERM or EACCES), and the supervisor, its fork server and another job are
untouched. Scratch directories are private and gone after their job; a reasonable handler
works unchanged.

To see this set go red without the confinement: POOLSUP_TEST_SANDBOX=off makes every
handler here `sandbox = "off"` (the first kill then takes down the fork server or the
supervisor).
"""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil
import pytest

from supervisor import Client
from tests.helpers.pool import finished, fork_server_of, wait_for
from tests.integration.conftest import Pool

EPERM, EACCES = "[Errno 1] Operation not permitted", "[Errno 13] Permission denied"
EROFS = "[Errno 30] Read-only file system"
FORCED = os.environ.get("POOLSUP_TEST_SANDBOX")
SECRET = "hunter2-in-the-environment"


def sandbox(value: Any) -> Any:
    return FORCED or value


def handlers(profile: str, allowed_port: int, shared: Path) -> dict[str, dict[str, Any]]:
    """`shared`: a directory a strict sleeper may write its pid in."""
    hostile: Any = profile
    sleeper: Any = profile
    if profile == "strict":
        hostile = {"profile": "strict", "network": [allowed_port]}
        shared.mkdir(exist_ok=True)
        sleeper = {"profile": "strict", "writable": [str(shared)]}
    return {
        "hostile": {"path": "sandbox_hostile.py", "function": "attempt", "max_attempts": 1,
                    "sandbox": sandbox(hostile)},
        "sleeper": {"path": "sandbox_hostile.py", "function": "sleeper", "max_attempts": 1,
                    "sandbox": sandbox(sleeper)},
        "scratch": {"path": "sandbox_hostile.py", "function": "scratch", "max_attempts": 1,
                    "sandbox": sandbox(profile)},
        "reused": {"path": "sandbox_hostile.py", "function": "scratch", "max_attempts": 1,
                   "max_jobs_per_child": 10, "sandbox": sandbox(profile)},
        "reasonable": {"path": "sandbox_hostile.py", "function": "reasonable",
                       "max_attempts": 1, "sandbox": sandbox(hostile)},
    }


@pytest.fixture
def listeners(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Sockets outside any job: an abstract and a path unix socket, and a TCP port that
    answers "hi"."""
    abstract = f"poolsup-test-{uuid.uuid4().hex}"
    sockets = []
    unix_abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix_abstract.bind("\0" + abstract)
    unix_path = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path = str(tmp_path / "outside.sock")
    unix_path.bind(path)
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("127.0.0.1", 0))
    for sock in (unix_abstract, unix_path, tcp):
        sock.listen(16)
        sockets.append(sock)
    stop = False

    def answer() -> None:
        while not stop:
            with contextlib.suppress(OSError):
                connection, _ = tcp.accept()
                connection.sendall(b"hi")
                connection.close()

    import threading

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    yield {"abstract": abstract, "path": path, "tcp": tcp.getsockname()[1]}
    stop = True
    for sock in sockets:
        sock.close()



def untouched(process: psutil.Process) -> bool:
    return process.is_running() and process.status() not in (
        psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)


def run_job(client: Client, key: str, handler: str, payload: dict[str, Any]) -> dict[str, Any]:
    client.dispatch(key, payload, handler=handler)
    record: dict[str, Any] = wait_for(lambda: finished(client, key), 30, message=key)
    return record


def refused(record: dict[str, Any], *errors: str) -> bool:
    return record["state"] == "failed" and any(e in (record["error"] or "") for e in errors)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("profile", ["default", "strict"])
def test_guarantee_11_hostile_jobs_are_refused_and_reach_nothing(
    pool: Pool, profile: str, listeners: dict[str, Any], redis_url: str, tmp_path: Path,
) -> None:
    config = pool.config(handlers(profile, listeners["tcp"], tmp_path / "shared"), capacity=3,
                         lease_ttl=3)
    supervisor = pool.start(config, env={"A_SECRET": SECRET})
    client = pool.client()
    fork_server = fork_server_of(supervisor)
    pid_file = tmp_path / "shared" / "sleeper.pid"
    pid_file.parent.mkdir(exist_ok=True)
    client.dispatch("other-job", {"pid_file": str(pid_file), "seconds": 60}, handler="sleeper")
    other = psutil.Process(int(wait_for(lambda: pid_file.exists() and pid_file.read_text(), 20,
                                        message="the other job's pid")))
    targets = {"supervisor": supervisor.pid, "fork server": fork_server.pid,
               "other job": other.pid}

    attempts: list[tuple[str, dict[str, Any], tuple[str, ...]]] = []
    attempts += [
        ("ptrace attach to the supervisor", {"action": "ptrace", "target": supervisor.pid},
         (EPERM,)),
        ("reading the config file", {"action": "read", "target": str(config)}, (EACCES,)),
        ("writing the config file", {"action": "write", "target": str(config)},
         (EACCES, EROFS)),
        ("connecting to an abstract socket outside the job",
         {"action": "connect_abstract", "target": listeners["abstract"]}, (EPERM,)),
    ]
    if pool.store.startswith("sqlite"):
        database = urlsplit(pool.store).path
        attempts += [
            ("reading the SQLite store", {"action": "read", "target": database}, (EACCES,)),
            ("reading the SQLite WAL", {"action": "read", "target": database + "-wal"},
             (EACCES,)),
        ]
    if profile == "strict":
        redis_port = urlsplit(redis_url).port
        attempts += [
            ("connecting to a path socket outside the job",
             {"action": "connect_path", "target": listeners["path"]}, (EPERM,)),
            ("writing outside the scratch directory",
             {"action": "write", "target": str(tmp_path / "outside.txt")}, (EACCES,)),
            ("a TCP connection to Redis",
             {"action": "connect_tcp", "target": redis_port}, (EACCES,)),
            ("a mount", {"action": "mount", "target": str(tmp_path)}, (EPERM,)),
            ("loading a BPF program", {"action": "bpf"}, (EPERM,)),
        ]

    for name, pid in reversed(targets.items()):  # the supervisor last: off, it stops all
        attempts += [
            (f"SIGSTOP to the {name}", {"action": "sigstop", "target": pid}, (EPERM,)),
            (f"SIGKILL to the {name}", {"action": "sigkill", "target": pid}, (EPERM,)),
        ]
    # Readable (Landlock refuses only attaching), but the supervisor blanked it.
    record = run_job(client, "environ", "hostile", {"action": "environ",
                                                    "target": supervisor.pid})
    assert SECRET not in str(record), record
    failures = []
    for number, (what, payload, errors) in enumerate(attempts):
        try:
            record = run_job(client, f"hostile-{number}", "hostile", payload)
        except AssertionError:
            failures.append(f"{what}: the job never ended (the supervisor was stopped?)")
            break
        if not refused(record, *errors):
            failures.append(f"{what}: {record['state']} {record.get('error') or record}")
    assert not failures, "\n".join(failures)

    for name, process in {"supervisor": psutil.Process(supervisor.pid),
                          "fork server": fork_server, "other job": other}.items():
        assert untouched(process), f"the {name} was touched: {process.status()}"
    assert fork_server_of(supervisor).pid == fork_server.pid
    assert not (tmp_path / "outside.txt").exists()
    assert "written by a job" not in config.read_text()
    client.stop("other-job", wait=False)
    record = run_job(client, "after", "reasonable", {"port": listeners["tcp"]}
                     if profile == "default" else {})
    assert record["state"] == "succeeded", record
    assert supervisor.process.poll() is None, supervisor.log()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("profile", ["default", "strict"])
def test_guarantee_11_scratch_is_private_and_gone_after_the_job(
    pool: Pool, profile: str, listeners: dict[str, Any], tmp_path: Path,
) -> None:
    pool.start(pool.config(handlers(profile, listeners["tcp"], tmp_path / "shared"), capacity=2))
    client = pool.client()
    seen = []
    for key, handler in [("s-1", "scratch"), ("s-2", "scratch"), ("r-1", "reused"),
                         ("r-2", "reused")]:
        record = run_job(client, key, handler, {})
        assert record["state"] == "succeeded", record
        assert record["result"]["mode"] == "0o700", record
        seen.append(record["result"]["scratch"])
    assert len(set(seen)) == len(seen), seen
    for path in seen:
        wait_for(lambda path=path: not os.path.exists(path), 5,  # type: ignore[misc]
                 message=f"{path} to be removed")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("profile", ["default", "strict"])
def test_guarantee_11_a_reasonable_handler_works_unchanged(
    pool: Pool, profile: str, listeners: dict[str, Any], tmp_path: Path,
) -> None:
    pool.start(pool.config(handlers(profile, listeners["tcp"], tmp_path / "shared"), capacity=2))
    client = pool.client()
    payload: dict[str, Any] = {"port": listeners["tcp"]}
    if profile == "default":
        payload["directory"] = str(tmp_path)  # beside the config file, which is hidden
    record = run_job(client, "ok", "reasonable", payload)
    assert record["state"] == "succeeded", record
    assert record["result"] == {"text": "hello", "echoed": "from a subprocess",
                                "threads": [0, 1, 4, 9], "received": "hi"}, record
