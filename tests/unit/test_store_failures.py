"""The store-failure log of a loop: the first failure, a change of failure, a summary."""

import logging

import pytest

from supervisor.errors import StoreError, StoreUnavailable
from supervisor.observe.store_failures import StoreFailures

OOM = ("redis at redis://h/0 refused the request: command not allowed when used memory "
       "> 'maxmemory'. script: {sha}, on @user_script:85.")


def test_an_outage_is_logged_once_and_again_when_it_changes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failures = StoreFailures("claim")
    with caplog.at_level(logging.INFO, logger="poolsup.store"):
        failures.failed(StoreError(OOM.format(sha="a" * 40)))
        failures.failed(StoreError(OOM.format(sha="b" * 40)))
        failures.failed(StoreError("redis at redis://h/0 refused the request: You can't "
                                   "write against a read only replica."))
        failures.failed(StoreUnavailable("redis at redis://h/0 unreachable: refused"))
        failures.succeeded()
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 4, messages
    assert "maxmemory" in messages[0]
    assert "read only replica" in messages[1]
    assert "unreachable" in messages[2]
    assert messages[3].startswith("store works again (claim)")
    assert not failures.failing
