"""One policy for store failures in a long-lived loop: log the first, summarise the rest,
say when the store works again.  The loop itself retries with backoff, forever."""

from __future__ import annotations

import logging
import re
import time

from supervisor.core.retry import loop_retry_delay
from supervisor.errors import StoreFailure, StoreUnavailable
from supervisor.observe.metrics import metrics

log = logging.getLogger("poolsup.store")

SUMMARY_INTERVAL = 60.0
# Redis names the script in its error text; the same failure of another script is no news.
_SCRIPT_SHA = re.compile(r"script: [0-9a-f]{40}, on @user_script:\d+\.?")


class StoreFailures:
    """The failures of one loop ("claim", "renewal", ...) since the store last worked."""

    def __init__(self, loop: str) -> None:
        self.loop = loop
        self.failing_since: float | None = None
        self.in_a_row = 0
        self._summarised_at = 0.0
        self._kind = ""

    @property
    def failing(self) -> bool:
        return self.failing_since is not None

    def failed(self, error: StoreFailure | TimeoutError) -> float:
        """Record a failure; the seconds to wait before the next try."""
        now = time.monotonic()
        self.in_a_row += 1
        metrics.store_errors.labels(self.loop, _kind(error)).inc()
        text = str(error) or type(error).__name__
        kind = _SCRIPT_SHA.sub("", text)
        if self.failing_since is None:
            self.failing_since = self._summarised_at = now
            self._kind = kind
            log.warning("store failing (%s), retrying with backoff: %s", self.loop, text)
        elif kind != self._kind:  # an outage that changes its face is worth a line
            self._kind = kind
            log.warning("store still failing (%s), now: %s", self.loop, text)
        elif now - self._summarised_at >= SUMMARY_INTERVAL:
            self._summarised_at = now
            log.warning("store still failing (%s) after %.0f s, %d errors; last: %s",
                        self.loop, now - self.failing_since, self.in_a_row, text)
        return loop_retry_delay(self.in_a_row)

    def succeeded(self) -> None:
        if self.failing_since is not None:
            log.info("store works again (%s) after %.1f s, %d errors", self.loop,
                     time.monotonic() - self.failing_since, self.in_a_row)
        self.failing_since = None
        self.in_a_row = 0


def _kind(error: StoreFailure | TimeoutError) -> str:
    if isinstance(error, TimeoutError):
        return "timeout"
    return "unavailable" if isinstance(error, StoreUnavailable) else "error"
