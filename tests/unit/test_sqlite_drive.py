"""sqlite/drive.py: a coroutine that never suspends is run to its end by hand; one that
suspends is refused, and closed."""

from __future__ import annotations

import asyncio

import pytest

from supervisor.store.sqlite.drive import Suspended, run_to_end


async def _plain(value: int) -> int:
    return value


async def _nested() -> int:
    # Awaiting coroutines that do not suspend does not suspend either.
    return await _plain(2) + await _plain(3)


async def _raises() -> None:
    await _plain(1)
    raise KeyError("inside")


def test_a_coroutine_that_never_suspends_gives_its_value() -> None:
    assert run_to_end(_nested()) == 5


def test_its_exception_comes_out_as_raised() -> None:
    with pytest.raises(KeyError, match="inside"):
        run_to_end(_raises())


def test_a_coroutine_that_suspends_is_refused_and_closed() -> None:
    cleaned = []

    async def sleeps() -> None:
        try:
            await asyncio.sleep(0)
        finally:
            cleaned.append(True)

    coroutine = sleeps()
    with pytest.raises(Suspended, match="suspended"):
        run_to_end(coroutine)
    assert cleaned == [True]  # its finally ran: it was closed, not left half done
    assert coroutine.cr_frame is None
