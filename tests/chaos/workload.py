"""The workload of the plan, played against the pool with the Python client.  Every
call is retried while the store fails (a fault may be on); what the driver did is
written into the history for the checker."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from supervisor import Client, JobExists, JobNotFound
from tests.chaos.checker import History, Note
from tests.chaos.ledger import now
from tests.chaos.plan import Work

RETRY_FOR = 60.0
RETRY_EVERY = 0.2


class GaveUp(Exception):
    """The store failed every retry for RETRY_FOR seconds."""


def retried(call: Callable[[], Any], on_retry: Callable[[], None] = lambda: None) -> Any:
    """`call()`, again and again while it raises anything but the client's answers."""
    deadline = time.monotonic() + RETRY_FOR
    while True:
        try:
            return call()
        except (JobExists, JobNotFound):
            raise
        except Exception as error:
            if time.monotonic() > deadline:
                raise GaveUp(repr(error)) from error
            on_retry()
            time.sleep(RETRY_EVERY)


class Workload:
    def __init__(self, client: Client, history: History, ledger: Path,
                 log: Callable[[str], None]) -> None:
        self.client = client
        self.history = history
        self.ledger = ledger
        self.log = log
        self.undispatched: list[str] = []
        self.error: BaseException | None = None  # what ended `play` early, for the driver

    def play(self, plan: list[Work], started: float, stopping: threading.Event) -> None:
        try:
            self._play(plan, started, stopping)
        except BaseException as error:
            self.error = error

    def _play(self, plan: list[Work], started: float, stopping: threading.Event) -> None:
        for item in plan:
            delay = started + item.at - time.monotonic()
            if delay > 0 and stopping.wait(delay):
                return
            try:
                getattr(self, item.action)(item)
            except GaveUp as error:
                self.log(f"{item.action} {item.key}: gave up: {error}")

    def dispatch(self, item: Work) -> None:
        retries = 0

        def count() -> None:
            nonlocal retries
            retries += 1

        payload = {"ledger": str(self.ledger), **item.payload}
        try:
            retried(lambda: self.client.dispatch(item.key, payload, handler=item.kind), count)
        except JobExists:
            if not retries:  # keys are unique: only our own retry can have stored it
                raise
        except GaveUp:
            self.undispatched.append(item.key)
            raise
        self.history.kinds[item.key] = item.kind

    def notify(self, item: Work) -> None:
        if item.key not in self.history.kinds or item.key in self.history.stops:
            return
        ambiguous = False

        def mark() -> None:
            nonlocal ambiguous
            ambiguous = True

        try:
            retried(lambda: self.client.notify(item.key, {"n": item.note}), mark)
        except JobNotFound:
            return
        self.history.notes.setdefault(item.key, []).append(Note(item.note, now(), ambiguous))

    def stop(self, item: Work) -> None:
        if item.key not in self.history.kinds:
            return
        self.history.stops.setdefault(item.key, now())  # before: a failed call may have landed
        with contextlib.suppress(JobNotFound):
            retried(lambda: self.client.stop(item.key, wait=False))
