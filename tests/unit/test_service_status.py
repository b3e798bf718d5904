"""What systemd is told about a running supervisor: the STATUS= line and stop-time
extensions during a drain."""

from supervisor.core.service_status import (
    DRAIN_EXTENSION,
    DrainProgress,
    drain_extension,
    status_line,
)


def test_status_line_while_serving() -> None:
    assert status_line(running=2, capacity=4, store_failing=False, draining=False) == (
        "2/4 jobs running, store ok"
    )


def test_status_line_names_a_failing_store() -> None:
    assert status_line(running=0, capacity=4, store_failing=True, draining=False) == (
        "0/4 jobs running, store failing"
    )


def test_status_line_while_draining() -> None:
    assert status_line(running=3, capacity=4, store_failing=False, draining=True) == (
        "draining: 3 job(s) left, store ok"
    )


def test_a_drain_within_its_budget_gets_more_time() -> None:
    progress = DrainProgress.start(jobs_left=3, now=100.0)
    assert drain_extension(progress, now=139.0, budget=40.0) == DRAIN_EXTENSION


def test_a_drain_past_its_budget_gets_more_time_while_jobs_still_end() -> None:
    progress = DrainProgress.start(jobs_left=3, now=100.0).observe(jobs_left=2, now=145.0)
    assert drain_extension(progress, now=150.0, budget=40.0) == DRAIN_EXTENSION


def test_a_drain_past_its_budget_with_no_job_ending_gets_no_more_time() -> None:
    progress = DrainProgress.start(jobs_left=3, now=100.0).observe(jobs_left=3, now=145.0)
    assert progress.progressed_at == 100.0
    assert drain_extension(progress, now=150.0, budget=40.0) is None


def test_jobs_left_going_up_is_not_progress() -> None:
    progress = DrainProgress.start(jobs_left=1, now=100.0).observe(jobs_left=2, now=120.0)
    assert progress.progressed_at == 100.0
    assert progress.jobs_left == 2
