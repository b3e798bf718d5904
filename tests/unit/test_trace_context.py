"""Which trace contexts a dispatch keeps (observe/trace_context.py): a valid W3C
traceparent, with a tracestate short enough to pass on."""

from __future__ import annotations

import pytest

from supervisor.observe.trace_context import (
    MAX_TRACESTATE,
    TraceContext,
    carried,
    checked,
    current,
    from_environ,
)

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_a_valid_traceparent_is_kept_with_its_tracestate() -> None:
    assert checked(PARENT, "a=1,b=2") == TraceContext(PARENT, "a=1,b=2")
    assert checked(PARENT.upper()) == TraceContext(PARENT, None)


@pytest.mark.parametrize("bad", [
    "", "garbage", PARENT + "-extra", "ff" + PARENT[2:],
    "00-00000000000000000000000000000000-b7ad6b7169203331-01",
    "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
    "00-0af7651916cd43dd8448eb211c80319z-b7ad6b7169203331-01",
])
def test_an_invalid_traceparent_is_no_context(bad: str) -> None:
    assert checked(bad, "a=1") is None


def test_a_tracestate_too_long_to_pass_on_is_dropped() -> None:
    assert checked(PARENT, "a=" + "x" * MAX_TRACESTATE) == TraceContext(PARENT, None)


def test_the_environment_gives_traceparent_and_tracestate() -> None:
    assert from_environ({"TRACEPARENT": PARENT, "TRACESTATE": "k=v"}) == \
        TraceContext(PARENT, "k=v")
    assert from_environ({"TRACESTATE": "k=v"}) is None


def test_a_carried_context_is_current_within_and_only_within() -> None:
    handed = TraceContext(PARENT, "k=v")
    with carried(handed):
        assert current() == handed
    assert current() is None
