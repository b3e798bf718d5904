"""Many jobs at once, on each store: `client.dispatch_many` and `dispatch --from-file`
(exit 0 all added, 3 some refused and listed, 2 a malformed line and nothing added); and
the dispatch options `--priority`, `--group`, `--unique-for` checked at the edge."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from supervisor import Client
from supervisor.errors import InvalidJob
from tests.acceptance.test_cli import poolsup
from tests.helpers.pool import write_pool

MANY = 10_000


@pytest.fixture(params=["redis", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "redis":
        return str(request.getfixturevalue("redis_url"))
    return f"sqlite:///{tmp_path}/pool.db"


@pytest.fixture
def client(store_url: str, pool_name: str) -> Iterator[Client]:
    with Client(store_url, pool=pool_name) as client:
        yield client


@pytest.fixture
def config(tmp_path: Path, store_url: str, pool_name: str) -> str:
    return str(write_pool(tmp_path, store=store_url, pool=pool_name, handlers={
        "echo": {"path": "outcomes.py", "function": "async_echo"},
        "fails": {"path": "outcomes.py", "function": "always_fails"},
    }))


def test_dispatch_many_of_ten_thousand_adds_all_but_the_live_keys(client: Client) -> None:
    live = {"k00042", "k05000", "k09999"}
    for key in live:
        client.dispatch(key, {"first": True}, handler="h")
    client.dispatch("k00007", handler="h")
    client.stop("k00007")  # finished: dispatched again like any finished key
    items = [{"key": f"k{i:05}", "handler": "h", "payload": {"i": i}} for i in range(MANY)]

    started = time.monotonic()
    results = client.dispatch_many(items)
    took = time.monotonic() - started

    assert [result["key"] for result in results] == [item["key"] for item in items]
    refused = {result["key"]: result["error"] for result in results if not result["added"]}
    assert set(refused) == live
    assert all("live" in why for why in refused.values())
    assert len(client.jobs("pending")) == MANY
    assert client.job("k00042")["payload"] == {"first": True}
    assert client.job("k00007")["payload"] == {"i": 7}
    assert took < 10.0, took  # measured for real in bench/bulk_dispatch.py


def test_a_key_given_twice_is_added_once(client: Client) -> None:
    results = client.dispatch_many([{"key": "k", "handler": "h", "payload": 1},
                                    {"key": "k", "handler": "h", "payload": 2}])

    assert [result["added"] for result in results] == [True, False]
    assert client.job("k")["payload"] == 1


@pytest.mark.parametrize(("item", "why"), [
    ({"key": "b", "handler": "h", "priority": 10}, "priority"),
    ({"key": "b", "handler": "h", "unique_for": -1}, "unique_for"),
    ({"key": "b", "handler": "h", "max_attempts": "3"}, "max_attempts"),
    ({"key": "b", "handler": "h", "colour": "red"}, "colour"),
    ({"key": "b"}, "handler"),
    ({"handler": "h"}, "key"),
])
def test_a_bad_item_adds_nothing(client: Client, item: dict[str, object], why: str) -> None:
    with pytest.raises(InvalidJob, match=rf"item 1: .*{why}"):
        client.dispatch_many([{"key": "a", "handler": "h"}, item])

    assert client.jobs() == []


def test_dispatch_checks_priority_group_and_unique_for(client: Client) -> None:
    for options in ({"priority": 10}, {"priority": -1}, {"group": ""}, {"unique_for": -5}):
        with pytest.raises(InvalidJob):
            client.dispatch("k", handler="h", **options)
    assert client.jobs() == []
    client.dispatch("k", handler="h", priority=9, group="tenant-7", unique_for=600)
    assert client.job("k")["state"] == "pending"


def lines(*items: dict[str, object]) -> bytes:
    return b"".join(orjson.dumps(item) + b"\n" for item in items)


def test_from_file_adds_every_line_and_exits_0(config: str, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_bytes(lines({"key": "a", "handler": "echo", "payload": {"x": 1}},
                           {"key": "b", "handler": "fails", "priority": 3, "group": "g"})
                     + b"\n")

    result = poolsup("dispatch", "-c", config, "--from-file", str(jobs))

    assert result.returncode == 0, result.stderr
    assert "2 of 2" in result.stdout
    listed = orjson.loads(poolsup("jobs", "-c", config, "--json").stdout)
    assert {job["key"]: job["handler"] for job in listed} == {"a": "echo", "b": "fails"}


def test_from_stdin_lists_each_refused_key_and_exits_3(config: str) -> None:
    assert poolsup("dispatch", "-c", config, "b", "-H", "echo").returncode == 0

    result = poolsup("dispatch", "-c", config, "--from-file", "-", "-H", "echo",
                     stdin=lines({"key": "a"}, {"key": "b"}, {"key": "c"}))

    assert result.returncode == 3, result.stderr
    stderr = result.stderr.strip().splitlines()
    assert stderr[0] == "b: already live (pending or running)"
    assert "1 of 3" in stderr[1] and len(stderr) == 2
    listed = orjson.loads(poolsup("jobs", "-c", config, "--json").stdout)
    assert sorted(job["key"] for job in listed) == ["a", "b", "c"]


@pytest.mark.parametrize(("line", "why"), [
    (b"{nope", "not valid JSON"),
    (b'["a"]', "JSON object"),
    (b'{"key": "z", "handler": "ghost"}', "unknown handler"),
    (b'{"key": "z", "handler": "echo", "priority": 10}', "priority"),
    (b'{"key": "bad\\tkey", "handler": "echo"}', "invalid job key"),
])
def test_a_malformed_line_exits_2_naming_it_and_adds_nothing(
    config: str, tmp_path: Path, line: bytes, why: str
) -> None:
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_bytes(lines({"key": "a", "handler": "echo"}) + line + b"\n")

    result = poolsup("dispatch", "-c", config, "--from-file", str(jobs))

    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert f"{jobs}:2: " in result.stderr and why in result.stderr
    assert orjson.loads(poolsup("jobs", "-c", config, "--json").stdout) == []


@pytest.mark.parametrize(("args", "why"), [
    (["k", "--priority", "10"], "priority"),
    (["k", "--unique-for", "-1"], "unique_for"),
    (["k", "--timeout", "5"], "--wait"),
    (["k", "--from-file", "-"], "--from-file"),
    (["--from-file", "-", "--priority", "3"], "--priority"),
    ([], "KEY"),
])
def test_dispatch_options_are_checked_with_one_line_and_exit_2(
    config: str, args: list[str], why: str
) -> None:
    result = poolsup("dispatch", "-c", config, "-H", "echo", *args, stdin=b"")

    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and why in result.stderr, result.stderr


def test_dispatch_passes_priority_group_and_unique_for(config: str) -> None:
    result = poolsup("dispatch", "-c", config, "k", "-H", "echo", "--priority", "9",
                     "--group", "tenant-7", "--unique-for", "600")

    assert result.returncode == 0, result.stderr
