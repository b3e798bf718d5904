"""SIGHUP reloads handler files; a dead fork server is replaced."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil

from tests.helpers.pool import finished, wait_for
from tests.integration.conftest import Pool

VERSIONED = '''
import time

def run(job):
    time.sleep(job.payload.get("seconds", 0))
    return "{version}"
'''



def test_sighup_loads_new_handler_code_and_running_jobs_keep_theirs(
    pool: Pool, tmp_path: Path
) -> None:
    handler = tmp_path / "versioned.py"
    handler.write_text(VERSIONED.format(version="v1"))
    supervisor = pool.start(pool.config({"versioned": {"path": str(handler), "timeout": 0}}))
    client = pool.client()
    client.dispatch("old", {"seconds": 3}, handler="versioned")
    wait_for(lambda: client.job("old")["state"] == "running", 20)

    handler.write_text(VERSIONED.format(version="v2"))
    supervisor.signal(signal.SIGHUP)
    wait_for(lambda: "handlers reloaded" in supervisor.log(), 20, message="reload")
    client.dispatch("new", {}, handler="versioned")
    assert wait_for(lambda: finished(client, "new"), 20)["result"] == "v2"
    assert wait_for(lambda: finished(client, "old"), 20)["result"] == "v1"


def test_sighup_with_a_broken_config_keeps_serving(pool: Pool, tmp_path: Path) -> None:
    handler = tmp_path / "versioned.py"
    handler.write_text(VERSIONED.format(version="v1"))
    config = pool.config({"versioned": {"path": str(handler), "timeout": 0}})
    supervisor = pool.start(config)
    config.write_text(config.read_text() + "\n[supervisor]\nnonsense = 1\n")
    supervisor.signal(signal.SIGHUP)
    wait_for(lambda: "config not reloaded" in supervisor.log(), 20)
    client = pool.client()
    client.dispatch("still", {}, handler="versioned")
    assert wait_for(lambda: finished(client, "still"), 20)["result"] == "v1"


def test_a_killed_fork_server_is_replaced(pool: Pool, tmp_path: Path) -> None:
    handler = tmp_path / "versioned.py"
    handler.write_text(VERSIONED.format(version="v1"))
    supervisor = pool.start(pool.config({"versioned": {"path": str(handler), "timeout": 0}}))
    fork_servers = [p for p in psutil.Process(supervisor.pid).children()
                    if "sandbox.forkserver" in " ".join(p.cmdline())]
    assert len(fork_servers) == 1
    os.kill(fork_servers[0].pid, signal.SIGKILL)
    wait_for(lambda: "starting a new one" in supervisor.log(), 20)
    client = pool.client()
    client.dispatch("after", {}, handler="versioned")
    assert wait_for(lambda: finished(client, "after"), 20)["result"] == "v1"
    assert supervisor.process.poll() is None
