"""The `poolsup` command as a user runs it: messages and exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.helpers.pool import HANDLERS_DIR, write_pool


def poolsup(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor.cli", *args],
        input=stdin.decode() if stdin is not None else None,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def config(tmp_path: Path, redis_url: str, pool_name: str) -> Path:
    return write_pool(
        tmp_path,
        store=redis_url,
        pool=pool_name,
        handlers={"echo": {"path": "outcomes.py", "function": "async_echo"}},
    )


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pool.toml"
    path.write_text(text)
    return path


GOOD_HANDLER = f'[handlers.h]\npath = "{HANDLERS_DIR / "outcomes.py"}"\nfunction = "async_echo"\n'

BAD_CONFIGS = {
    "malformed": ('[pool]\nname = "p"\ncapacity = = 3\n', "invalid TOML"),
    "unknown key": ('[pool]\nname = "p"\n[supervisor]\ncapasity = 3\n' + GOOD_HANDLER, "capasity"),
    "wrong type": (
        '[pool]\nname = "p"\n[supervisor]\nlease_ttl = "ten"\n' + GOOD_HANDLER,
        "lease_ttl",
    ),
    "capacity 0": ('[pool]\nname = "p"\n[supervisor]\ncapacity = 0\n' + GOOD_HANDLER, "capacity"),
    "missing handler path": ('[pool]\nname = "p"\n[handlers.h]\npath = "nope.py"\n', "nope.py"),
    "no handlers": ('[pool]\nname = "p"\n', "handler"),
    # Past what the stores hold (SQLite's and orjson's 64 bits, a C long for rlimits):
    # these passed `check`, then broke `run` or every job.
    "integer past 64 bits": (
        '[pool]\nname = "p"\nmax_pending = 99999999999999999999\n' + GOOD_HANDLER,
        "max_pending",
    ),
    "size past 64 bits": (
        '[pool]\nname = "p"\n' + GOOD_HANDLER + "memory_limit = 99999999999999999999\n",
        "memory_limit",
    ),
    "duration past a C long": (
        '[pool]\nname = "p"\n' + GOOD_HANDLER + "cpu_limit = 1e300\n", "cpu_limit"
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_check_rejects_bad_config_with_one_line_and_exit_2(tmp_path: Path, case: str) -> None:
    text, expected = BAD_CONFIGS[case]
    result = poolsup("check", "-c", str(write(tmp_path, text)))
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr
    assert "pool.toml" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_check_reports_a_handler_that_fails_to_import(tmp_path: Path) -> None:
    text = f'[pool]\nname = "p"\n[handlers.b]\npath = "{HANDLERS_DIR / "broken_import.py"}"\n'
    result = poolsup("check", "-c", str(write(tmp_path, text)))
    assert result.returncode == 2
    assert "this_module_does_not_exist" in result.stderr


def test_check_accepts_a_good_config(config: Path) -> None:
    result = poolsup("check", "-c", str(config))
    assert result.returncode == 0, result.stderr


def test_dispatch_then_conflict_then_job_and_jobs(config: Path) -> None:
    assert poolsup("dispatch", "-c", str(config), "k1", "--payload", '{"a": 1}').returncode == 0
    again = poolsup("dispatch", "-c", str(config), "k1")
    assert again.returncode == 3
    assert "k1" in again.stderr or "live" in again.stderr
    shown = poolsup("job", "-c", str(config), "k1", "--json")
    assert shown.returncode == 0
    record = orjson.loads(shown.stdout)
    for field in (
        "key",
        "handler",
        "state",
        "attempts",
        "token",
        "supervisor",
        "payload",
        "result",
        "error",
        "created_at",
        "started_at",
        "finished_at",
    ):
        assert field in record
    assert record["payload"] == {"a": 1} and record["state"] == "pending"
    listed = orjson.loads(poolsup("jobs", "-c", str(config), "--json").stdout)
    assert [r["key"] for r in listed] == ["k1"]


def test_payload_from_stdin(config: Path) -> None:
    result = poolsup("dispatch", "-c", str(config), "k2", "--payload-file", "-", stdin=b"[1,2]")
    assert result.returncode == 0, result.stderr
    assert orjson.loads(poolsup("job", "-c", str(config), "k2", "--json").stdout)["payload"] == [
        1,
        2,
    ]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["bad\tkey"], "invalid job key"),
        (["k", "--payload", "{nope"], "not valid JSON"),
        (["k", "--handler", "ghost"], "unknown handler"),
    ],
)
def test_dispatch_rejects_bad_input_with_exit_2(
    config: Path, args: list[str], expected: str
) -> None:
    result = poolsup("dispatch", "-c", str(config), *args)
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr


def test_unknown_key_exits_4(config: Path) -> None:
    for command in (["job", "ghost"], ["stop", "ghost"], ["notify", "ghost", "--payload", "1"]):
        result = poolsup(command[0], "-c", str(config), *command[1:])
        assert result.returncode == 4, (command, result.stderr)


def test_status_json_and_unreachable_store(config: Path, tmp_path: Path, pool_name: str) -> None:
    result = poolsup("status", "-c", str(config), "--json")
    assert result.returncode == 0, result.stderr
    status = orjson.loads(result.stdout)
    assert status["pool"] == pool_name
    assert set(status["counts"]) >= {"pending", "running", "succeeded", "failed"}
    dead = write_pool(
        tmp_path,
        store="redis://127.0.0.1:1/0",
        pool="p",
        name="dead.toml",
        handlers={"echo": {"path": "outcomes.py", "function": "async_echo"}},
    )
    unreachable = poolsup("status", "-c", str(dead))
    assert unreachable.returncode == 1
    assert "unreachable" in unreachable.stderr


def test_oversized_payload_is_refused(config: Path) -> None:
    big = b'"' + b"x" * (1024 * 1024 + 10) + b'"'
    result = poolsup("dispatch", "-c", str(config), "big", "--payload-file", "-", stdin=big)
    assert result.returncode == 2, result.stderr
    assert "above the limit" in result.stderr
    assert poolsup("job", "-c", str(config), "big").returncode == 4


@pytest.mark.parametrize(
    "when", [["--in", "1e15"], ["--in", "1e300"], ["--at", "0001-01-01T00:00:00"]]
)
def test_a_start_time_beyond_what_a_date_can_hold_is_refused_with_exit_2(
    config: Path, when: list[str]
) -> None:
    result = poolsup("dispatch", "-c", str(config), "far", *when)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert when[0] in result.stderr
    assert poolsup("job", "-c", str(config), "far").returncode == 4


def test_max_attempts_past_what_the_store_holds_is_refused_with_exit_2(tmp_path: Path) -> None:
    config = write_pool(tmp_path, store=f"sqlite:///{tmp_path}/pool.db", pool="p",
                        handlers={"echo": {"path": "outcomes.py", "function": "async_echo"}})
    result = poolsup("dispatch", "-c", str(config), "k", "--max-attempts", str(2**64))
    assert result.returncode == 2, result.stderr
    assert "max_attempts" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["dispatch", "k", "--priority", "abc"], "--priority"),
        (["dispatch", "k", "--payload-file", "/nonexistent/payload.json"], "--payload-file"),
        (["notify", "k"], "--payload"),
        (["status", "--bogus"], "--bogus"),
        (["stauts"], "stauts"),
        (["logs", "k", "--attempt", "0"], "--attempt"),
    ],
)
def test_a_usage_error_is_one_line_with_exit_2(
    config: Path, args: list[str], expected: str
) -> None:
    result = poolsup(*args[:1], "-c", str(config), *args[1:])
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "--help" in result.stderr  # where to look next, as click's usage text said


def test_help_and_version_still_work(config: Path) -> None:
    assert poolsup("--help").returncode == 0
    assert "dispatch" in poolsup("--help").stdout
    assert poolsup("dispatch", "--help").returncode == 0
    assert poolsup("--version").returncode == 0
    assert poolsup().returncode in (0, 2)  # click shows the usage for a bare group
