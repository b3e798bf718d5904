"""How a handler file defines its function, told from its source (child_concurrency needs
an async def)."""

from __future__ import annotations

from supervisor.handler_source import defined_as


def test_a_plain_and_an_async_def_are_told_apart() -> None:
    assert defined_as(b"def run(job):\n    return 1\n", "run") == "def"
    assert defined_as(b"async def run(job):\n    return 1\n", "run") == "async def"


def test_the_last_top_level_definition_counts() -> None:
    source = b"def run(job): pass\nasync def run(job): pass\n"
    assert defined_as(source, "run") == "async def"
    assert defined_as(b"async def run(job): pass\nrun = make()\n", "run") is None
    assert defined_as(b"from elsewhere import run\n", "run") is None


def test_what_the_source_cannot_tell_is_left_to_loading() -> None:
    assert defined_as(b"def other(job): pass\n", "run") is None
    assert defined_as(b"def run(job:\n", "run") is None  # a syntax error
    assert defined_as(b"class A:\n    def run(self): pass\n", "run") is None
