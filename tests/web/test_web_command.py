"""`poolsup web` as a user starts it: exit 2 for what it refuses, each with one line,
and exit 0 on SIGTERM."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.pool import write_pool
from tests.helpers.redis_server import free_port
from tests.web.dashboard import Dashboard

BLOCK_STARLETTE = '''
import importlib.abc, sys

class _NoStarlette(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "starlette" or name.startswith("starlette."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NoStarlette())
'''


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_pool(tmp_path, store=f"sqlite:///{tmp_path}/pool.db", pool="webcli",
                      handlers={})


def _web(config: Path, *args: str, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "web", "-c", str(config), *args],
        capture_output=True, text=True, timeout=30,
        env={**{k: v for k, v in os.environ.items() if k != "POOLSUP_WEB_TOKEN"},
             **(env or {})})


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


def test_a_non_loopback_address_without_a_token_is_exit_2(config: Path) -> None:
    for listen in ("0.0.0.0:8080", "192.0.2.7:80", "[::]:8080", "example.com:8080"):
        done = _web(config, "--listen", listen)
        assert done.returncode == 2, (listen, done.stderr)
        assert "not a loopback address" in _one_line(done.stderr)


def test_bad_listen_addresses_and_token_files_are_exit_2(config: Path, tmp_path: Path) -> None:
    done = _web(config, "--listen", "nonsense")
    assert done.returncode == 2
    assert "expected HOST:PORT" in _one_line(done.stderr)
    empty = tmp_path / "empty"
    empty.write_text("\n")
    done = _web(config, "--token-file", str(empty))
    assert done.returncode == 2
    assert "the file is empty" in _one_line(done.stderr)
    done = _web(config, "--token-file", str(tmp_path / "missing"))
    assert done.returncode == 2
    assert "cannot read it" in _one_line(done.stderr)


def test_any_address_serves_with_a_token_from_the_environment(config: Path) -> None:
    dashboard = Dashboard(config, ("--listen", "0.0.0.0:0"),
                          env={"POOLSUP_WEB_TOKEN": "env-token"})
    dashboard.start()
    try:
        with dashboard.session() as anonymous:
            assert anonymous.get("/").status_code == 401
        with dashboard.session("env-token") as browser:
            assert browser.get("/").status_code == 200
    finally:
        assert dashboard.stop() == 0


def test_without_the_web_extra_it_says_how_to_install_it(config: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(BLOCK_STARLETTE)
    path = os.pathsep.join([str(blocker), *filter(None, [os.environ.get("PYTHONPATH")])])
    done = _web(config, env={"PYTHONPATH": path})
    assert done.returncode == 2, done.stderr
    assert _one_line(done.stderr) == (
        "poolsup web needs the web extra: pip install 'poolsup[web]'")


def test_an_address_in_use_is_exit_1_with_one_line(config: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = _web(config, "--listen", f"127.0.0.1:{port}")
    assert done.returncode == 1
    assert "cannot listen there" in _one_line(done.stderr)


def test_an_unreachable_store_is_a_503_page_not_a_crash(tmp_path: Path) -> None:
    config = write_pool(tmp_path, store=f"redis://127.0.0.1:{free_port()}/0", pool="gone",
                        handlers={})
    dashboard = Dashboard(config).start()
    try:
        with dashboard.session() as browser:
            for path in ("/", "/parts/overview", "/jobs", "/jobs/k1"):
                page = browser.get(path)
                assert page.status_code == 503, path
                assert "Traceback" not in page.text
                assert 'id="problem"' in page.text
            assert dashboard.process.poll() is None
    finally:
        assert dashboard.stop() == 0
    assert "Traceback" not in dashboard.stderr
