"""Guarantee 8 on PostgreSQL: a wrong password, a missing privilege, an unreachable
server, a server restarted under a running pool.  The supervisor keeps serving and never
exits because of the store, nothing is lost, and every command says what is wrong in one
line with exit 1, its password hidden."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.pool import finished, wait_for, write_pool
from tests.helpers.postgres_server import PostgresServer
from tests.helpers.redis_server import free_port
from tests.integration.conftest import Pool

LEDGER = {"ledger": {"path": "ledger.py", "timeout": 0, "max_attempts": 3}}


def status(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "supervisor.cli", "status", "-c", str(config)],
                          capture_output=True, text=True, timeout=60)


def one_line(done: subprocess.CompletedProcess[str], *needles: str, code: int = 1) -> str:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert "s3cret" not in done.stderr and "s3cret" not in done.stdout
    return lines[0]


def test_an_option_value_libpq_refuses_is_a_configuration_error_for_every_command(
    tmp_path: Path, pool_name: str
) -> None:
    """`sslmode=bogus` is refused by libpq before it reaches any server: exit 2 and one
    line naming the option, from a command and from the supervisor alike (which would
    otherwise retry it forever as a store outage)."""
    url = f"postgresql://u:s3cret@127.0.0.1:{free_port()}/pool?sslmode=bogus"
    config = write_pool(tmp_path, store=url, pool=pool_name, handlers=LEDGER)
    line = one_line(status(config), 'invalid sslmode value: "bogus"', code=2)
    assert line.startswith("poolsup: store URL 'postgresql://u:***@127.0.0.1:"), line
    run = subprocess.run([sys.executable, "-m", "supervisor.cli", "run", "-c", str(config)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, (run.returncode, run.stderr)
    assert 'invalid sslmode value: "bogus"' in run.stderr and "s3cret" not in run.stderr


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    yield server
    server.remove()


def test_the_cli_says_a_wrong_password_unreachable_server_or_missing_privilege_in_one_line(
    tmp_path: Path, postgres_server: PostgresServer, pool_name: str
) -> None:
    user = f"u{uuid.uuid4().hex[:8]}"
    url = postgres_server.add_user(user, "s3cret")
    wrong = url.replace(":s3cret@", ":wr0ng@")

    def config(store: str) -> Path:
        return write_pool(tmp_path, store=store, pool=pool_name, handlers=LEDGER)

    line = one_line(status(config(wrong)), "password authentication failed", user)
    assert line.startswith(f"poolsup: postgresql at postgresql://{user}:***@127.0.0.1:"), line
    one_line(status(config(f"postgresql://{user}:s3cret@127.0.0.1:{free_port()}/pool")),
             "Connection refused")
    # Right password, but no right to create the schema poolsup in a new database.
    postgres_server.psql(f"CREATE DATABASE {user}_db")
    one_line(status(config(url.rsplit("/", 1)[0] + f"/{user}_db")), "permission denied")


def test_guarantee_8_a_supervisor_with_a_wrong_password_keeps_trying_until_it_is_fixed(
    tmp_path: Path, postgres_server: PostgresServer, pool_name: str, ledger: Path
) -> None:
    # A role that is no superuser, with a database of its own: the supervisor makes the
    # schema there itself once it gets in.
    user = f"u{uuid.uuid4().hex[:8]}"
    url = postgres_server.add_user(user, "s3cret")
    postgres_server.psql(f"CREATE DATABASE {user}_db OWNER {user}")
    url = url.rsplit("/", 1)[0] + f"/{user}_db"
    postgres_server.psql(f"ALTER ROLE {user} PASSWORD 'other'")
    pool = Pool(tmp_path, url, pool_name)
    try:
        supervisor = pool.start(pool.config(LEDGER, id="a", lease_ttl=3), serving=False)
        wait_for(lambda: "password authentication failed" in supervisor.log(), 60,
                 message="the supervisor to say why")
        assert supervisor.process.poll() is None, supervisor.log()
        assert "s3cret" not in supervisor.log()
        postgres_server.psql(f"ALTER ROLE {user} PASSWORD 's3cret'")
        supervisor.wait_serving(30)
        client = pool.client()
        client.dispatch("after-fix", {"ledger": str(ledger), "seconds": 0.1}, handler="ledger")
        assert wait_for(lambda: finished(client, "after-fix"), 30)["state"] == "succeeded"
    finally:
        pool.close()


def test_guarantee_8_a_server_restarted_under_a_running_pool_loses_nothing(
    tmp_path: Path, own_postgres: PostgresServer, pool_name: str, ledger: Path
) -> None:
    pool = Pool(tmp_path, own_postgres.url, pool_name)
    try:
        supervisor = pool.start(pool.config(LEDGER, id="a", capacity=2, lease_ttl=10))
        client = pool.client()
        client.dispatch("through", {"ledger": str(ledger), "seconds": 4}, handler="ledger")
        wait_for(lambda: client.job("through")["state"] == "running", 20, message="a start")
        own_postgres.restart()
        client.dispatch("after", {"ledger": str(ledger), "seconds": 0.1}, handler="ledger")
        for key in ("through", "after"):
            record = wait_for(lambda key=key: finished(client, key), 30, message=f"{key}")
            assert (record["state"], record["attempts"]) == ("succeeded", 1), record
        assert supervisor.process.poll() is None, supervisor.log()
    finally:
        pool.close()
