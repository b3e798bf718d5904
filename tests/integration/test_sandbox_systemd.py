"""Guarantee 11 under the real systemd unit: the shipped poolsup.service, run by a real
systemd (PID 1 of a throwaway systemd-nspawn container: docs/sandbox.md, "Under systemd"),
as its unprivileged user; the hostile set of tests/helpers/systemd_hostile.py on Redis and
on SQLite.

Skipped where the container cannot be made (not root, no systemd-nspawn, no Debian
python3 to build the unit's virtual environment with)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from tests.helpers.pool import HANDLERS_DIR
from tests.helpers.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[2]
INSTALL = Path("/opt/poolsup-sandbox-test")  # outside /tmp, which the unit makes private
SYSTEM_PYTHON = "/usr/bin/python3"
LANDLOCK_CALLS = "landlock_create_ruleset landlock_add_rule landlock_restrict_self"

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="systemd-nspawn needs root"),
    pytest.mark.skipif(shutil.which("systemd-nspawn") is None,
                       reason="no systemd-nspawn (apt-get install systemd-container)"),
    pytest.mark.skipif(not os.path.exists(SYSTEM_PYTHON), reason=f"no {SYSTEM_PYTHON}"),
]

HANDLERS = """
[handlers.hostile]
path = "{h}"
function = "attempt"
max_attempts = 1

[handlers.hostile_strict]
path = "{h}"
function = "attempt"
max_attempts = 1
sandbox = {{profile = "strict", network = [16400]}}

[handlers.sleeper]
path = "{h}"
function = "sleeper"
max_attempts = 1

[handlers.scratch]
path = "{h}"
function = "scratch"
max_attempts = 1

[handlers.reasonable]
path = "{h}"
function = "reasonable"
max_attempts = 1
"""


def install() -> None:
    """The unit's virtual environment, with Debian's python3 (the container has it), and
    the hostile handlers and driver beside it."""
    venv = INSTALL / "venv"
    # From a copy without build/: setuptools keeps it in the tree, and files another
    # checkout's build left there (an older Lua script) would be installed too.
    with tempfile.TemporaryDirectory() as source:
        shutil.copytree(ROOT, source, dirs_exist_ok=True, ignore=shutil.ignore_patterns(
            ".git", "build", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"))
        if not (venv / "bin" / "poolsup").exists():
            subprocess.run([SYSTEM_PYTHON, "-m", "venv", str(venv)], check=True)
            subprocess.run([str(venv / "bin" / "pip"), "install", "-q", source], check=True,
                           timeout=600)
        else:  # this checkout's code, over the dependencies installed before
            # pip removes only the files its record lists: drop every file of ours, so
            # that none an older install left behind (a renamed Lua script) remains.
            for package in venv.glob("lib/python*/site-packages/*"):
                if package.name in ("supervisor", "sandbox") or package.name.startswith(
                        "poolsup-"):
                    shutil.rmtree(package)
            subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-deps",
                            "--force-reinstall", source], check=True, timeout=600)
    (INSTALL / "handlers").mkdir(exist_ok=True)
    shutil.copy(HANDLERS_DIR / "sandbox_hostile.py", INSTALL / "handlers")
    shutil.copy(ROOT / "tests" / "helpers" / "systemd_hostile.py", INSTALL)


class Container:
    def __init__(self, box: Path) -> None:
        self.box = box
        self.name = f"poolsup-{uuid.uuid4().hex[:8]}"
        self.process: subprocess.Popen[bytes] | None = None
        self.pid1 = 0

    def boot(self) -> None:
        unit = (ROOT / "systemd" / "poolsup.service").read_text().replace(
            "/opt/poolsup/venv", str(INSTALL / "venv"))
        (self.box / "poolsup.service").write_text(unit)
        (self.box / "poolsup.conf").write_text('u poolsup - "poolsup" /var/lib/poolsup\n')
        with (self.box / "nspawn.log").open("wb") as log:
            self.process = self._start(log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            self.pid1 = self._pid1()
            if self.pid1 and self.run("systemctl", "is-system-running").stdout.strip() in (
                "running", "degraded"
            ):
                return
            time.sleep(0.5)
        pytest.skip(f"the container did not boot: {(self.box / 'nspawn.log').read_text()[-500:]}")

    def _start(self, log: IO[bytes]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            ["systemd-nspawn", "-D", "/", "--volatile=yes", "--register=no", "--keep-unit",
             f"--machine={self.name}", f"--bind-ro={INSTALL}:{INSTALL}",
             f"--bind-ro={self.box / 'etc'}:/etc/poolsup",
             f"--bind-ro={self.box / 'poolsup.service'}:/etc/systemd/system/poolsup.service",
             f"--bind-ro={self.box / 'poolsup.conf'}:/etc/sysusers.d/poolsup.conf",
             # systemd 252's nspawn refuses Landlock's calls to the whole container.
             f"--system-call-filter={LANDLOCK_CALLS}",
             "-b", "--", "systemd.firstboot=off"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )

    def _pid1(self) -> int:
        assert self.process is not None
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        try:
            return int(children.read_text().split()[0])
        except (OSError, IndexError, ValueError):
            return 0

    def run(self, *command: str, user: str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
        prefix = ["nsenter", "-t", str(self.pid1), "-a"]
        if user is not None:
            prefix += ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "--"]
        return subprocess.run([*prefix, *command], capture_output=True, text=True,
                              timeout=timeout)

    def poweroff(self) -> None:
        if self.process is None:
            return
        if self.pid1:
            self.run("systemctl", "poweroff")
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def container(tmp_path: Path) -> Iterator[Container]:
    install()
    (tmp_path / "etc").mkdir()
    box = Container(tmp_path)
    try:
        box.boot()
        yield box
    finally:
        box.poweroff()


@pytest.mark.timeout(600)
def test_guarantee_11_under_the_shipped_systemd_unit_on_both_stores(
    container: Container, redis_server: RedisServer, tmp_path: Path,
) -> None:
    handlers = HANDLERS.format(h=INSTALL / "handlers" / "sandbox_hostile.py")
    for store, url in (("sqlite", "sqlite:////var/lib/poolsup/pool.db"),
                       ("redis", redis_server.url)):
        config = tmp_path / "etc" / "pool.toml"
        config.write_text(f'[pool]\nname = "box"\nstore = "{url}"\n\n[supervisor]\n'
                          f"capacity = 3\nlease_ttl = 3\n{handlers}")
        config.chmod(0o644)  # readable by the service's user: only the sandbox stops a job
        started = container.run("systemctl", "restart", "poolsup")
        journal = container.run("journalctl", "-u", "poolsup", "--no-pager").stdout
        assert started.returncode == 0, started.stderr + journal[-3000:]
        main_pid = container.run("systemctl", "show", "-p", "MainPID", "--value",
                                 "poolsup").stdout.strip()
        result = container.run(
            f"{INSTALL}/venv/bin/python", f"{INSTALL}/systemd_hostile.py", "/etc/poolsup/pool.toml",
            main_pid, str(redis_server.port), store, user="poolsup", timeout=240,
        )
        print(f"--- {store}\n{result.stdout}{result.stderr}")
        journal = container.run("journalctl", "-u", "poolsup", "--no-pager").stdout
        assert result.returncode == 0, f"{store}:\n{result.stdout}{result.stderr}{journal[-3000:]}"
        assert result.stdout.strip().endswith("all refused")
