"""The CLI and `poolsup run` against a Redis with ACL users: credentials in the URL work
end to end, and refused ones give one line, exit 1 (commands) or a retry (run)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.acceptance.test_cli import poolsup
from tests.helpers.pool import SupervisorProcess, wait_for, write_pool
from tests.helpers.redis_server import RedisServer

USER, PASSWORD = "app", "pa:ss@word"  # characters a URL must escape
PERMISSIONS = ("~poolsup:*", "&poolsup:*", "+@all")
HANDLERS = {"echo": {"path": "outcomes.py", "function": "async_echo"}}


@pytest.fixture(scope="module")
def acl_redis() -> Iterator[RedisServer]:
    server = RedisServer(
        username=USER, password=PASSWORD,
        args=("--user", USER, "on", f">{PASSWORD}", *PERMISSIONS, "--user", "default", "off"),
    ).start()
    yield server
    server.remove()


def config_for(tmp_path: Path, store: str, pool_name: str, name: str = "pool.toml") -> Path:
    return write_pool(tmp_path, store=store, pool=pool_name, handlers=HANDLERS, name=name,
                      lease_ttl=2)


def test_commands_and_a_supervisor_work_as_an_acl_user(
    acl_redis: RedisServer, tmp_path: Path, pool_name: str
) -> None:
    config = config_for(tmp_path, acl_redis.url, pool_name)
    supervisor = SupervisorProcess(config, tmp_path / "supervisor.log").start()
    try:
        supervisor.wait_serving()
        assert poolsup("dispatch", "-c", str(config), "k1").returncode == 0

        def state() -> str:
            shown = poolsup("job", "-c", str(config), "k1", "--json")
            assert shown.returncode == 0, shown.stderr
            return str(orjson.loads(shown.stdout)["state"])

        wait_for(lambda: state() == "succeeded", 20, interval=0.2, message="k1 to succeed")
        assert poolsup("status", "-c", str(config)).returncode == 0
    finally:
        supervisor.kill()
    assert PASSWORD not in supervisor.log()


@pytest.mark.parametrize("command", [["dispatch", "k1"], ["status"], ["jobs"]])
def test_a_wrong_password_exits_1_with_one_line_naming_the_store(
    acl_redis: RedisServer, tmp_path: Path, pool_name: str, command: list[str]
) -> None:
    config = config_for(tmp_path, acl_redis.url_as(USER, "not-the-password"), pool_name)
    result = poolsup(command[0], "-c", str(config), *command[1:])
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "authentication failed" in lines[0]
    assert f"redis://{USER}:***@127.0.0.1:{acl_redis.port}/0" in lines[0]
    assert "not-the-password" not in result.stderr


def test_run_retries_refused_credentials_until_the_store_takes_them(
    acl_redis: RedisServer, tmp_path: Path, pool_name: str
) -> None:
    user, password = f"late-{pool_name}", "late-password"
    config = config_for(tmp_path, acl_redis.url_as(user, password), pool_name)
    supervisor = SupervisorProcess(config, tmp_path / "supervisor.log").start()
    try:
        wait_for(lambda: "authentication failed" in supervisor.log(), 20,
                 message="the refused credentials to be logged")
        assert supervisor.process.poll() is None, supervisor.log()
        acl_setuser(acl_redis, user, password)
        supervisor.wait_serving(timeout=20)
    finally:
        supervisor.kill()
    assert password not in supervisor.log()


def acl_setuser(server: RedisServer, user: str, password: str) -> None:
    assert server.password is not None and server.username is not None
    subprocess.run(
        ["redis-cli", "-p", str(server.port), "--user", server.username,
         "--pass", server.password, "--no-auth-warning",
         "ACL", "SETUSER", user, "on", f">{password}", *PERMISSIONS],
        check=True, capture_output=True, timeout=10,
    )
