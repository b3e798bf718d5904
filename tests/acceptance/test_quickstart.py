"""The README's quick start, run as a newcomer runs it: its ```sh blocks, line by line,
in a fresh virtual environment made by the block's own first line.

The blocks are read from README.md at test time, so the README cannot drift from what
works. They run in a copy of this working tree's files that git does not ignore
(`git ls-files --cached --others --exclude-standard`), not in a `git clone`: a clone
holds only HEAD, so it would test the README of the last commit, not the one being
edited, against code that the rest of the suite is not testing. Like a clone, the copy
leaves out what .gitignore names, so a stale `poolsup.egg-info`, `.venv` or `poolsup.db`
cannot hide a failure. It keeps untracked files, so that a new module that a changed one
imports is there; a file that was never `git add`ed is caught by CI, whose working tree
is a clean checkout (there, this copy and a clone hold the same files).

Each line runs as written with `bash -c`, from the copy's root, with these exceptions,
which stand for a newcomer's two terminals: the `poolsup run` line runs in the background
until the rest is done, then gets SIGTERM; an `export` line sets the variable for the
lines after it; a `poolsup job ... --json` line runs again until the job has finished (a
newcomer looks again)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import psutil
import pytest

from tests.helpers.redis_server import RedisServer

REPO = Path(__file__).resolve().parents[2]
README_REDIS_URL = "redis://127.0.0.1:6379/0"
INSTALL_TIMEOUT = 480.0  # `pip install .`: in CI it downloads from PyPI
COMMAND_TIMEOUT = 60.0
READY_TIMEOUT = 30.0
FINISH_TIMEOUT = 30.0
EXIT_TIMEOUT = 30.0
FINISHED = {"succeeded", "failed", "stopped"}


def quick_start_blocks(readme: str) -> list[list[str]]:
    """The commands of each ```sh block of the "## Quick start" section (up to its first
    subsection): continuation lines joined, blank and comment-only lines left out."""
    _, found, after = readme.partition("\n## Quick start\n")
    assert found, "README.md has no '## Quick start' section"
    section = re.split(r"\n#{2,} ", after, maxsplit=1)[0]
    blocks = [commands(block) for block in re.findall(r"```sh\n(.*?)```", section, re.S)]
    assert blocks, "the quick start has no ```sh block"
    return blocks


def commands(block: str) -> list[str]:
    found: list[str] = []
    pending = ""
    for raw in block.splitlines():
        line = pending + raw
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        if line.strip() and not line.lstrip().startswith("#"):
            found.append(line)
    return found


def words(line: str) -> list[str]:
    return shlex.split(line, comments=True)


def split_assignments(line: str) -> tuple[dict[str, str], list[str]]:
    """`A=1 B=2 cmd args` -> ({"A": "1", "B": "2"}, ["cmd", "args"])."""
    command = words(line)
    assignments: dict[str, str] = {}
    while command and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", command[0]):
        name, value = command.pop(0).split("=", 1)
        assignments[name] = value
    return assignments, command


def is_poolsup(line: str, subcommand: str) -> bool:
    command = split_assignments(line)[1]
    return len(command) >= 2 and Path(command[0]).name == "poolsup" and (
        command[1] == subcommand
    )


def is_supervisor(line: str) -> bool:
    return is_poolsup(line, "run")


def is_job_json(line: str) -> bool:
    return is_poolsup(line, "job") and "--json" in words(line)


def copy_tracked_files(destination: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, check=True, timeout=30,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if not source.exists() and not source.is_symlink():
            continue  # deleted in the working tree, not yet committed
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)


def in_git_work_tree() -> bool:
    try:
        probe = subprocess.run(
            ["git", "rev-parse", "--is-inside-work-tree"], cwd=REPO,
            capture_output=True, text=True, timeout=30,
        )
    except OSError:
        return False
    return probe.returncode == 0 and probe.stdout.strip() == "true"


def newcomer_env() -> dict[str, str]:
    """This environment without what would make the blocks pass for the wrong reason:
    a pool or store named from outside, an active venv, this checkout on the path."""
    env = {
        key: value for key, value in os.environ.items()
        if not key.startswith("POOLSUP_") and key not in {"VIRTUAL_ENV", "PYTHONPATH"}
    }
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_line(line: str, cwd: Path, env: dict[str, str]) -> str:
    timeout = INSTALL_TIMEOUT if "pip install" in line else COMMAND_TIMEOUT
    result = subprocess.run(
        ["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, (
        f"README quick start line exited {result.returncode}: {line}\n"
        f"stdout: {result.stdout[-3000:]}\nstderr: {result.stderr[-3000:]}"
    )
    return result.stdout


def ours(root: Path) -> list[psutil.Process]:
    """Processes of this copy: started from it, or with their working directory in it."""
    found = []
    for proc in psutil.process_iter():
        try:
            if str(root) in " ".join(proc.cmdline()) or proc.cwd().startswith(str(root)):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@pytest.fixture
def checkout(tmp_path: Path) -> Iterator[Path]:
    if not in_git_work_tree():
        pytest.skip("not a git checkout: the quick start runs in a copy of the tracked files")
    root = tmp_path / "poolsup"
    copy_tracked_files(root)
    yield root
    leftovers = ours(root)
    for proc in leftovers:
        proc.kill()
    psutil.wait_procs(leftovers, timeout=10)


def wait_ready(
    supervisor: subprocess.Popen[bytes], status: list[str], root: Path,
    env: dict[str, str], log: Path,
) -> int:
    """The pid of the one supervisor `status --json` lists as running."""
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if supervisor.poll() is not None:
            raise AssertionError(
                f"the supervisor exited {supervisor.returncode}: {log.read_text()[-3000:]}"
            )
        probe = subprocess.run(
            status, cwd=root, env=env, capture_output=True, timeout=COMMAND_TIMEOUT,
        )
        if probe.returncode == 0:
            running = [
                sup for sup in orjson.loads(probe.stdout)["supervisors"]
                if sup["state"] == "running"
            ]
            if running:
                assert len(running) == 1, running
                pid: int = running[0]["pid"]
                return pid
        time.sleep(0.2)
    raise AssertionError(f"the supervisor did not come up: {log.read_text()[-3000:]}")


def wait_finished(line: str, root: Path, env: dict[str, str]) -> dict[str, Any]:
    deadline = time.monotonic() + FINISH_TIMEOUT
    while True:
        record: dict[str, Any] = orjson.loads(run_line(line, root, env))
        if record["state"] in FINISHED or time.monotonic() > deadline:
            return record
        time.sleep(0.2)


def run_as_a_newcomer(lines: list[str], root: Path) -> dict[str, Any]:
    """Runs the lines (see the module's docstring); returns the job's last record."""
    supervisors = [line for line in lines if is_supervisor(line)]
    assert len(supervisors) == 1, f"expected one `poolsup run` line: {lines}"
    env = newcomer_env()
    log = root.parent / "supervisor.log"
    supervisor: subprocess.Popen[bytes] | None = None
    supervisor_pid = 0
    record: dict[str, Any] | None = None
    try:
        for line in lines:
            if words(line)[0] == "export":
                env.update(assignment.split("=", 1) for assignment in words(line)[1:])
            elif is_supervisor(line):
                with log.open("wb") as out:
                    supervisor = subprocess.Popen(
                        ["bash", "-c", line], cwd=root, env=env,
                        stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                    )
                assignments, command = split_assignments(line)
                status = [command[0], "status", *command[2:], "--json"]
                supervisor_pid = wait_ready(supervisor, status, root, env | assignments, log)
                assert supervisor_pid == supervisor.pid or supervisor_pid in {
                    child.pid for child in psutil.Process(supervisor.pid).children()
                }, "status lists a supervisor that is not the README's"
            elif is_job_json(line):
                record = wait_finished(line, root, env)
            else:
                run_line(line, root, env)

        assert supervisor is not None
        assert record is not None, "the quick start never shows the job (`job ... --json`)"
        descendants = psutil.Process(supervisor_pid).children(recursive=True)
        os.kill(supervisor_pid, signal.SIGTERM)
        assert supervisor.wait(timeout=EXIT_TIMEOUT) == 0, log.read_text()[-3000:]
        _, alive = psutil.wait_procs(descendants, timeout=EXIT_TIMEOUT)
        assert not alive, f"left behind after the supervisor exited: {alive}"
        return record
    finally:
        if supervisor is not None and supervisor.poll() is None:
            os.killpg(supervisor.pid, signal.SIGKILL)
            supervisor.wait(timeout=EXIT_TIMEOUT)


@pytest.mark.timeout(600)
def test_readme_quick_start_runs_as_written(checkout: Path) -> None:
    quick_start = quick_start_blocks((checkout / "README.md").read_text())[0]
    record = run_as_a_newcomer(quick_start, checkout)
    assert record["state"] == "succeeded", record
    assert record["result"]["greeted"] == "Ada", record


@pytest.mark.timeout(600)
def test_readme_quick_start_on_redis_runs_as_written(
    checkout: Path, redis_server: RedisServer,
) -> None:
    """The Redis block in place of the quick start's supervisor line, with the test's
    server in place of the README's 127.0.0.1:6379 (which this machine may not have)."""
    readme = (checkout / "README.md").read_text()
    assert README_REDIS_URL in readme
    quick_start, on_redis, *_ = quick_start_blocks(readme.replace(
        README_REDIS_URL, redis_server.url,
    ))
    at = [is_supervisor(line) for line in quick_start].index(True)
    record = run_as_a_newcomer(quick_start[:at] + on_redis + quick_start[at + 1:], checkout)
    assert record["state"] == "succeeded", record
    assert record["result"]["greeted"] == "Ada", record
