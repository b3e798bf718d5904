"""A child waiting for its job goes once through the job's first steps
(`sandbox.child.rehearse_job_start`), so that the pages they write are copied off the
job's way: it must leave nothing behind that the job could see."""

from __future__ import annotations

import os
import threading

import pytest

from sandbox.child import rehearse_job_start


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("job_key", [None, "set-by-the-handler's-env"])
def test_the_rehearsal_leaves_no_variable_descriptor_or_thread(
    monkeypatch: pytest.MonkeyPatch, job_key: str | None
) -> None:
    if job_key is None:
        monkeypatch.delenv("POOLSUP_JOB_KEY", raising=False)
    else:
        monkeypatch.setenv("POOLSUP_JOB_KEY", job_key)
    environment, fds, threads = dict(os.environ), open_fds(), threading.active_count()
    rehearse_job_start()
    assert dict(os.environ) == environment
    assert open_fds() == fds
    assert threading.active_count() == threads
