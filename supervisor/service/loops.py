"""A background loop that outlives its own bugs.

An unexpected exception in one of the daemon's loops would end its task group, and
with it the supervisor and every job it runs.  Each loop runs under `supervised`
instead: the exception is logged with its traceback, counted in
`poolsup_loop_restarts_total{loop=...}`, and the loop starts again after a backoff
(`core.retry.loop_retry_delay`, from 0.1 s doubling up to 5 s; back to the start once
a run lasted RESET_AFTER seconds).  A loop whose death must not be papered over (the
lease keeper) gives `on_death` instead: it is called once and the loop stays dead.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio

from supervisor.core.retry import loop_retry_delay
from supervisor.observe.metrics import metrics

log = logging.getLogger("poolsup")

RESET_AFTER = 60.0


async def supervised(
    name: str,
    loop: Callable[[], Awaitable[None]],
    on_death: Callable[[], None] | None = None,
) -> None:
    """Run `loop` until it returns (or is cancelled), restarting it after an
    unexpected exception; with `on_death`, call that instead of restarting."""
    failures = 0
    while True:
        started = anyio.current_time()
        try:
            await loop()
            return
        except Exception:
            if on_death is not None:
                log.critical("the %s loop failed", name, exc_info=True)
                on_death()
                return
            log.exception("the %s loop failed; restarting it", name)
            metrics.loop_restarts.labels(name).inc()
        if anyio.current_time() - started >= RESET_AFTER:
            failures = 0
        failures += 1
        await anyio.sleep(loop_retry_delay(failures))
