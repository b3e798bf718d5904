"""A reused child takes every signal left pending for its last job, queued real-time
signals included (`sandbox.reuse.discard_pending_signals`), in this process."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator

import pytest

from sandbox.reuse import discard_pending_signals

QUEUED = (signal.SIGRTMIN, signal.SIGRTMIN, signal.SIGRTMIN + 1, signal.SIGUSR2)


def queue_to_this_thread() -> None:
    """To this thread only: the test runner's other threads do not block them."""
    for signum in QUEUED:
        signal.pthread_kill(threading.get_ident(), signum)


@pytest.fixture
def all_blocked() -> Iterator[None]:
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        yield
    finally:
        while signal.sigpending():  # taken here too, should the test fail
            signal.sigtimedwait(signal.sigpending(), 0)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


@pytest.mark.usefixtures("all_blocked")
def test_every_queued_instance_is_taken() -> None:
    queue_to_this_thread()
    assert discard_pending_signals()
    assert signal.sigpending() == set()
    assert signal.sigtimedwait([signal.SIGRTMIN], 0) is None


@pytest.mark.usefixtures("all_blocked")
def test_more_than_the_bound_is_not_taken_for_good() -> None:
    queue_to_this_thread()
    assert not discard_pending_signals(most=2)
