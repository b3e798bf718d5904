"""A store URL's secrets never reach the terminal, whatever is wrong with the config."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.pool import write_pool

HANDLERS = {"h": {"path": "basic.py", "function": "echo"}}
SECRETS = ("pw-user", "pw-query", "pw-ssl", "pw-sentinel", "tok-auth")
# ssl_password first: an error may shorten a long URL, and must not hide a leak that way.
QUERY = ("ssl_password=pw-ssl&password=pw-query&sentinel_password=pw-sentinel"
         "&auth_token=tok-auth")


def poolsup(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "supervisor.cli", *args], capture_output=True,
                          text=True, timeout=60, env=env)


@pytest.mark.parametrize(
    ("command", "store"),
    [
        # The config refuses the scheme.
        ("check", f"http://user:pw-user@db.example:6379/0?{QUERY}"),
        ("check", f"mysql://:pw-user@db/0?{QUERY}"),
        # The Redis URL check refuses a parameter.
        ("status", f"rediss://user:pw-user@127.0.0.1:1/0?{QUERY}"),
        ("status", f"unix://user:pw-user@/run/no.sock?{QUERY}&ssl_keyfile=/k.pem"),
        ("status", f"redis://user:pw-user@127.0.0.1:1/0?{QUERY}"),
        # libpq refuses the URL and quotes it, or the token it could not read.
        ("status", f"postgresql://user:pw-user@[bad/pool?{QUERY}"),
        ("status", "postgres://user:pw-user%zz@127.0.0.1:1/pool"),
        ("jobs", f"postgresql://user:pw-user@[bad/pool?{QUERY}"),
    ],
)
def test_a_store_url_in_an_error_shows_no_secret(tmp_path: Path, command: str,
                                                  store: str) -> None:
    config = write_pool(tmp_path, store=store, pool="p", handlers=HANDLERS)

    result = poolsup(command, "-c", str(config))

    assert result.returncode != 0, result.stdout
    assert "***" in result.stderr, result.stderr
    for secret in SECRETS:
        assert secret not in result.stdout + result.stderr, result.stderr


def test_a_store_url_from_the_environment_shows_no_secret(tmp_path: Path) -> None:
    config = write_pool(tmp_path, store="redis://127.0.0.1:1/0", pool="p", handlers=HANDLERS)
    env = {"PATH": "/usr/bin:/bin", "POOLSUP_STORE": f"ftp://:pw-user@h/0?{QUERY}"}

    result = poolsup("check", "-c", str(config), env=env)

    assert result.returncode == 2 and "POOLSUP_STORE" in result.stderr, result.stderr
    for secret in SECRETS:
        assert secret not in result.stderr, result.stderr


@pytest.mark.parametrize("store", [
    # libpq's own keyword/value form, which a PostgreSQL user may well write here
    "host=127.0.0.1 user=app password=pw-user dbname=pool sslpassword='pw-ssl'",
    "postgresql:app:pw-user@127.0.0.1/pool",  # the // left out
    "app:pw-user@127.0.0.1:5432/pool",
])
def test_a_store_that_is_not_a_url_shows_no_secret_either(tmp_path: Path, store: str) -> None:
    config = write_pool(tmp_path, store="redis://127.0.0.1:1/0", pool="p", handlers=HANDLERS)

    in_env = poolsup("status", "-c", str(config),
                     env={**os.environ, "POOLSUP_STORE": store})
    in_file = poolsup("status", "-c", str(write_pool(
        tmp_path, store=store, pool="p", handlers=HANDLERS, name="other.toml")))

    for result in (in_env, in_file):
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "pw-user" not in result.stderr and "pw-ssl" not in result.stderr, result.stderr
