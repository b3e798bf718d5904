"""A stop's reason reaches the job even when its SIGTERM overtakes it.

The supervisor writes the reason on the child's socket just ahead of SIGTERM; the signal
is handled at once in the handler's thread while the reader thread is still reading the
message, so `job.stop_reason` would say "stop" for a move or a drain."""

from __future__ import annotations

import threading
import time

from sandbox.context import Inbox


def test_a_reason_read_just_after_the_sigterm_is_the_one_the_job_sees() -> None:
    inbox = Inbox()
    inbox.terminated = True  # the SIGTERM handler ran
    reader = threading.Timer(0.05, inbox.request_stop, args=("rebalance",))
    reader.start()
    try:
        assert inbox.stop_reason == "rebalance"
    finally:
        reader.join()


def test_a_sigterm_without_a_reason_is_a_stop_after_a_short_wait_once() -> None:
    inbox = Inbox()
    inbox.terminated = True
    started = time.monotonic()
    assert inbox.stop_reason == "stop"
    assert inbox.stop_reason == "stop"
    assert time.monotonic() - started < 1.0  # waited once, briefly


def test_a_reason_that_came_first_is_seen_at_once() -> None:
    inbox = Inbox()
    inbox.request_stop("drain")
    inbox.terminated = True
    started = time.monotonic()
    assert inbox.stop_reason == "drain"
    assert time.monotonic() - started < 0.05
