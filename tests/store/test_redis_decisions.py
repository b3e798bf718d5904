"""The decisions that live both in core/ (Python) and in the claim's Lua
(lua/include/lease_losses.lua): one table of cases through both forms, on a real Redis,
so that the two cannot drift apart."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from importlib import resources

import orjson
import pytest
import redis

from supervisor.core.failover import ended_by_failover
from supervisor.core.lease_losses import (
    WriteGap,
    claim_note_due,
    failing_window,
    judged_later,
    loss_counts,
)
from supervisor.store.redis.scripts import included
from tests.helpers.redis_server import RedisServer

Maybe = float | None

MIN_SPAN, TTL, DEFER = 5.0, 2.0, 3.0
NOW = 100.0
SINCES: list[Maybe] = [None, 90.0, 96.0, 99.0]  # a window of 10 s, 4 s (too short), 1 s
GAPS: list[tuple[float, float] | None] = [None, (80.0, 92.0), (95.0, 99.5)]
LEASE_ENDS: list[Maybe] = [None, 79.0, 80.0, 85.0, 90.0, 92.0, 93.5, 94.0, 95.0, 97.0,
                           99.5, 100.0, 101.5, 102.0]
HOLDS: list[Maybe] = [None, 85.0, 92.0, 100.0]

CASES = list(itertools.product(SINCES, GAPS, LEASE_ENDS))


@pytest.fixture(scope="module")
def lua() -> Iterator[redis.Redis]:
    server = RedisServer().start()
    client = redis.Redis.from_url(server.url)
    yield client
    client.close()
    server.remove()


def lua_nil(value: Maybe) -> str:
    return "nil" if value is None else repr(value)


def python_forms(since: Maybe, gap: tuple[float, float] | None, lease_end: Maybe) -> list[bool]:
    window = failing_window(since, NOW, min_span=MIN_SPAN)
    write_gap = None if gap is None else WriteGap(*gap)
    return [window is not None, loss_counts(lease_end, window),
            judged_later(lease_end, window, write_gap, NOW, ttl=TTL, defer=DEFER)]


def lua_forms(client: redis.Redis) -> list[list[bool]]:
    calls = []
    for since, gap, lease_end in CASES:
        lua_gap = "nil" if gap is None else f"{{start = {gap[0]!r}, finish = {gap[1]!r}}}"
        calls.append(
            f"do local w = failing_window({lua_nil(since)}, {NOW!r}, {MIN_SPAN!r}) "
            f"out[#out + 1] = {{w ~= nil, loss_counts({lua_nil(lease_end)}, w), "
            f"judged_later({lua_nil(lease_end)}, w, {lua_gap}, {NOW!r}, {TTL!r}, {DEFER!r})}} "
            "end")
    script = included("lease_losses") + "\nlocal out = {}\n" + "\n".join(calls) + \
        "\nreturn cjson.encode(out)"
    return list(orjson.loads(client.eval(script, 0)))


def test_the_lease_loss_decisions_agree_in_python_and_lua(lua: redis.Redis) -> None:
    answers = lua_forms(lua)

    assert len(answers) == len(CASES)
    for case, answer in zip(CASES, answers, strict=True):
        assert answer == python_forms(*case), case
    # The table reaches every branch: each answer is seen both ways.
    for column in range(3):
        assert {answer[column] for answer in answers} == {True, False}


def test_ended_by_failover_agrees_in_python_and_lua(lua: redis.Redis) -> None:
    cases = list(itertools.product(LEASE_ENDS, HOLDS))
    calls = [f"out[#out + 1] = ended_by_failover({lua_nil(end)}, {lua_nil(hold)})"
             for end, hold in cases]
    script = included("lease_losses") + "\nlocal out = {}\n" + "\n".join(calls) + \
        "\nreturn cjson.encode(out)"

    answers = orjson.loads(lua.eval(script, 0))

    assert answers == [ended_by_failover(end, hold) for end, hold in cases]
    assert set(answers) == {True, False}


def test_claim_note_due_agrees_in_python_and_lua(lua: redis.Redis) -> None:
    lasts: list[Maybe] = [None, 50.0, 99.0, 99.75, 99.8, 100.0, 160.0]
    cases = list(itertools.product(lasts, GAPS))
    calls = []
    for last, gap in cases:
        lua_gap = "nil" if gap is None else f"{{start = {gap[0]!r}, finish = {gap[1]!r}}}"
        calls.append(f"out[#out + 1] = claim_note_due({lua_nil(last)}, {NOW!r}, {lua_gap}, 0.25)")
    script = included("lease_losses") + "\nlocal out = {}\n" + "\n".join(calls) + \
        "\nreturn cjson.encode(out)"

    answers = orjson.loads(lua.eval(script, 0))

    assert answers == [claim_note_due(last, NOW, None if gap is None else WriteGap(*gap),
                                      every=0.25) for last, gap in cases]
    assert set(answers) == {True, False}


# Numbers in Lua that are the scripts' own layout (status codes, where arguments start),
# not policy.
LAYOUT_NAMES = {"OK", "FIRST_HANDLER", "FIXED_KEYS"}


def test_no_policy_number_is_written_as_a_lua_literal() -> None:
    folder = resources.files("supervisor.store.redis") / "lua"
    sources = [entry for entry in folder.iterdir() if entry.name.endswith(".lua")]
    sources += list((folder / "include").iterdir())
    literal = re.compile(r"^local ([A-Z_]+)[A-Z_, ]* = -?\d", re.MULTILINE)

    found = {(entry.name, name) for entry in sources
             for name in literal.findall(entry.read_text(encoding="utf-8"))}

    assert {name for _, name in found} <= LAYOUT_NAMES, found
