"""`[metrics] listen`: a Prometheus endpoint that shows what the supervisor did."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.pool import finished, fork_server_of, wait_for
from tests.helpers.redis_server import free_port
from tests.integration.conftest import Pool

HANDLERS = {
    "echo": {"path": "outcomes.py", "function": "async_echo"},
    "boom": {"path": "outcomes.py", "function": "always_fails", "max_attempts": 1},
    "sleeps": {"path": "outcomes.py", "function": "sleeps"},
}
LEASE_TTL = 2


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def with_metrics(config: Path, port: int) -> Path:
    config.write_text(config.read_text() + f'\n[metrics]\nlisten = "127.0.0.1:{port}"\n')
    return config


def test_metrics_show_the_jobs_that_ran(pool: Pool) -> None:
    port = free_port()
    pool.start(with_metrics(pool.config(HANDLERS, lease_ttl=2), port))
    client = pool.client()
    for i in range(3):
        client.dispatch(f"ok-{i}", {"x": i}, handler="echo")
    client.dispatch("bad", None, handler="boom")
    for key in ("ok-0", "ok-1", "ok-2", "bad"):
        wait_for(lambda key=key: finished(client, key), 20, message=f"{key} to finish")

    succeeded = ("poolsup_outcomes_total", (("cause", ""), ("outcome", "succeeded")))
    failed = ("poolsup_outcomes_total", (("cause", "error"), ("outcome", "failed")))

    def seen() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        # A job's outcome is counted once its settling task learns that the store took it,
        # which may be after a client already reads the job finished (a claim carries it).
        samples = scrape(port)
        counted = samples.get(succeeded, 0) + samples.get(failed, 0) >= 4
        # A renewal's lag is observed when it is sent, its result when the store answers.
        timed = samples.get(("poolsup_renewal_lag_seconds_count", ()), 0)
        renewed = samples.get(("poolsup_lease_renewals_total", (("result", "ok"),)), 0)
        return samples if counted and timed and renewed else {}

    samples = wait_for(seen, 10, message="a renewal answered and the 4 outcomes in the metrics")
    assert samples[("poolsup_claims_total", ())] == 4
    assert samples[succeeded] == 3
    assert samples[failed] == 1
    assert samples[("poolsup_lease_renewals_total", (("result", "ok"),))] >= 1
    assert ("poolsup_leases_lost_total", ()) in samples
    assert ("poolsup_store_errors_total", ()) not in samples  # labelled, none yet
    counted = wait_for(lambda: (s := scrape(port)).get(("poolsup_jobs", (("state", "succeeded"),)))
                       == 3 and s, 20, message="job counts")
    assert counted[("poolsup_jobs", (("state", "failed"),))] == 1


def test_the_failover_time_of_a_sigkilled_supervisors_job_is_observed_where_it_runs_again(
    pool: Pool,
) -> None:
    port_a, port_b = free_port(), free_port()
    first = pool.start(with_metrics(pool.config(HANDLERS, file="a.toml", id="a",
                                                lease_ttl=LEASE_TTL), port_a))
    client = pool.client()
    client.dispatch("fo-1", {"seconds": 3}, handler="sleeps")
    wait_for(lambda: client.job("fo-1")["state"] == "running", 20, message="fo-1 to run")
    assert scrape(port_a)[("poolsup_failover_seconds_count", ())] == 0  # a fresh dispatch
    pool.start(with_metrics(pool.config(HANDLERS, file="b.toml", id="b",
                                        lease_ttl=LEASE_TTL), port_b))
    first.process.kill()

    record = wait_for(lambda: finished(client, "fo-1"), LEASE_TTL + 20, message="fo-1 to end")

    assert (record["state"], record["supervisor"]) == ("succeeded", "b")
    samples = scrape(port_b)
    assert samples[("poolsup_failover_seconds_count", ())] == 1
    assert 0 < samples[("poolsup_failover_seconds_sum", ())] < LEASE_TTL + 2
    assert samples[("poolsup_failover_seconds_bucket", (("le", "60.0"),))] == 1
    print(f"\nfailover observed: {samples[('poolsup_failover_seconds_sum', ())]:.2f} s "
          f"(lease_ttl {LEASE_TTL} s)")


def test_metrics_without_prometheus_client_is_a_config_error(pool: Pool, tmp_path: Path) -> None:
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "prometheus_client.py").write_text("raise ImportError('not installed')\n")
    config = with_metrics(pool.config(HANDLERS), free_port())
    result = subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "check", "-c", str(config)],
        capture_output=True, text=True, env={"PYTHONPATH": str(blocked), "PATH": "/usr/bin"},
        timeout=60,
    )
    assert result.returncode == 2
    assert "[metrics]" in result.stderr and "pip install 'poolsup[metrics]'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def probe(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode().strip()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode().strip()


def test_health_endpoints_follow_the_fork_server(pool: Pool) -> None:
    port = free_port()
    supervisor = pool.start(with_metrics(pool.config(HANDLERS, lease_ttl=2), port))

    wait_for(lambda: probe(port, "/readyz") == (200, "ok"), 10, message="ready")
    assert probe(port, "/healthz") == (200, "ok")
    assert probe(port, "/metrics")[0] == 200
    fork_server = fork_server_of(supervisor)
    fork_server.suspend()  # what the watchdog would not ping through either
    try:
        wait_for(lambda: probe(port, "/healthz") == (503, "the fork server did not answer"),
                 10, message="healthz to fail")
        assert probe(port, "/readyz")[0] == 503
    finally:
        fork_server.resume()
    wait_for(lambda: probe(port, "/healthz") == (200, "ok"), 10, message="alive again")


def test_readyz_says_draining(pool: Pool) -> None:
    port = free_port()
    supervisor = pool.start(with_metrics(pool.config(HANDLERS, lease_ttl=2, drain_timeout=10),
                                         port))
    client = pool.client()
    client.dispatch("long", {"seconds": 8}, handler="sleeps")
    wait_for(lambda: client.job("long")["state"] == "running", 20, message="the job to run")
    wait_for(lambda: probe(port, "/readyz") == (200, "ok"), 10, message="ready")

    supervisor.signal(signal.SIGTERM)

    assert wait_for(lambda: probe(port, "/readyz")[1] == "draining", 5,
                    message="readyz to say draining")


def test_a_running_job_costs_the_supervisor_one_task(pool: Pool) -> None:
    """Issue 19's target: one task per running job on the supervisor's side (its sockets
    are read by event-loop callbacks, its timeout is a timer), measured from outside."""
    port = free_port()
    jobs = 12
    pool.start(with_metrics(pool.config(HANDLERS, lease_ttl=2, capacity=jobs), port))
    client = pool.client()

    def tasks() -> float:
        return scrape(port).get(("poolsup_event_loop_tasks", ()), 0.0)

    # The gauge is set every JOB_COUNT_INTERVAL (5 s), and counts the tasks that come
    # and go (a claim, a write in flight) with the steady ones: the idle count is the
    # least seen over a little more than one interval, and the running jobs must then
    # show as exactly one task each at one of the next updates.
    wait_for(tasks, 15, message="the task count")
    looks = []
    for _ in range(24):
        looks.append(tasks())
        time.sleep(0.25)
    idle = min(looks)
    for n in range(jobs):
        client.dispatch(f"sleep-{n}", {"seconds": 60}, handler="sleeps")
    wait_for(lambda: client.status()["counts"]["running"] == jobs
             and all(r["pid"] for r in client.status()["running"]), 30,
             message="every job running")
    seen: list[float] = []
    try:
        wait_for(lambda: seen.append(tasks()) or seen[-1] - idle == jobs, 20,
                 interval=0.25, message="one task per running job")
    except AssertionError as error:
        raise AssertionError(f"idle {idle}, then {sorted(set(seen))}") from error


def test_pending_jobs_are_shown_per_handler_for_an_autoscaler(pool: Pool) -> None:
    """`poolsup_jobs{state="pending",handler=...}`, what deploy/kubernetes's KEDA
    ScaledObject reads: each of the supervisor's handlers, 0 included; the other states
    keep their one label."""
    port = free_port()
    pool.start(with_metrics(pool.config(HANDLERS, lease_ttl=2), port))
    client = pool.client()
    client.pause()  # so that they stay pending
    for i in range(2):
        client.dispatch(f"e-{i}", {"x": i}, handler="echo")
    client.dispatch("b", None, handler="boom")

    def pending(handler: str) -> tuple[str, tuple[tuple[str, str], ...]]:
        return ("poolsup_jobs", (("handler", handler), ("state", "pending")))

    samples = wait_for(lambda: (s := scrape(port)).get(pending("echo")) == 2 and s, 20,
                       message="the pending jobs counted")
    assert samples[pending("boom")] == 1
    assert samples[pending("sleeps")] == 0
    assert samples[("poolsup_jobs", (("state", "running"),))] == 0
    assert ("poolsup_jobs", (("state", "pending"),)) not in samples
