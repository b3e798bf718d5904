"""The fence clock both sides of the fork server socket agree on."""

from __future__ import annotations

import time

from sandbox.protocol import fence_clock


def test_fence_clock_is_clock_boottime() -> None:
    before = time.clock_gettime(time.CLOCK_BOOTTIME)
    now = fence_clock()
    after = time.clock_gettime(time.CLOCK_BOOTTIME)
    assert before <= now <= after
