"""Prometheus metrics (`[metrics] listen`), kept by prometheus-client.

The supervisor records as it works (`metrics.claims.inc()`); with metrics off every
instrument is a no-op.  prometheus-client serves the scrapes from a thread of its own,
so a scrape never waits for the event loop and the loop never waits for a scrape.
"""

from __future__ import annotations

import logging
import socket
import threading
from typing import Any

from supervisor.observe.health import health
from supervisor.observe.job_counts import JobCounts

log = logging.getLogger("poolsup.metrics")

LAG_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# A failover takes at least the poll interval after the lease ran out, and at most
# about a lease ttl (the default is 10 s) when the dead supervisor held it just renewed.
FAILOVER_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0)


class _Off:
    """An instrument that records nothing."""

    def labels(self, *_values: str, **_labels: str) -> _Off:
        return self

    def inc(self, amount: float = 1.0) -> None:
        pass

    def set(self, value: float) -> None:
        pass

    def observe(self, value: float) -> None:
        pass

    def update(self, *_values: object) -> None:
        pass


_OFF: Any = _Off()


class Metrics:
    """The process's instruments: no-ops until `serve` is called."""

    def __init__(self) -> None:
        self.jobs: Any = _OFF
        self.claims: Any = _OFF
        self.recovered: Any = _OFF
        self.failover: Any = _OFF
        self.outcomes: Any = _OFF
        self.renewals: Any = _OFF
        self.renewal_lag: Any = _OFF
        self.leases_lost: Any = _OFF
        self.fenced_kills: Any = _OFF
        self.running_children: Any = _OFF
        self.children_rss: Any = _OFF
        self.children_cpu: Any = _OFF
        self.moves: Any = _OFF
        self.store_errors: Any = _OFF
        self.schedule_ticks: Any = _OFF
        self.loop_restarts: Any = _OFF
        self.paused: Any = _OFF
        self.tasks: Any = _OFF
        self.failover_held: Any = _OFF
        self._server: Any = None

    @property
    def on(self) -> bool:
        return self._server is not None

    def serve(self, host: str, port: int, *, supervisor: str) -> None:
        """Create the instruments and start serving /metrics on host:port."""
        import prometheus_client as prom

        registry = prom.CollectorRegistry()
        self.jobs = JobCounts()
        registry.register(self.jobs)
        self.claims = prom.Counter("poolsup_claims", "Jobs claimed by this supervisor",
                                   registry=registry)
        self.recovered = prom.Counter(
            "poolsup_recovered_leases", "Expired leases recovered by this supervisor's claims",
            registry=registry)
        self.failover = prom.Histogram(
            "poolsup_failover_seconds", "From the expiry of a lease to the job running again "
            "here (store clock), for each job this supervisor claimed after a recovery",
            buckets=FAILOVER_BUCKETS, registry=registry)
        self.outcomes = prom.Counter(
            "poolsup_outcomes", "Attempts ended here, by outcome (succeeded, failed, retried, "
            "stopped, released, snoozed, abandoned) and cause of a failure", ["outcome", "cause"],
            registry=registry)
        self.renewals = prom.Counter("poolsup_lease_renewals", "Batch lease renewals, by result",
                                     ["result"], registry=registry)
        self.renewal_lag = prom.Histogram(
            "poolsup_renewal_lag_seconds", "How late each renewal was sent",
            buckets=LAG_BUCKETS, registry=registry)
        self.leases_lost = prom.Counter("poolsup_leases_lost", "Leases found lost at renewal",
                                        registry=registry)
        self.fenced_kills = prom.Counter(
            "poolsup_fenced_kills", "Children killed by the fence (lease not renewed in time)",
            registry=registry)
        self.running_children = prom.Gauge("poolsup_running_children",
                                           "Job children running now", registry=registry)
        self.children_rss = prom.Gauge("poolsup_children_rss_bytes",
                                       "Resident memory of the job children, summed",
                                       registry=registry)
        self.children_cpu = prom.Gauge("poolsup_children_cpu_percent",
                                       "CPU use of the job children, summed", registry=registry)
        self.moves = prom.Counter("poolsup_rebalance_moves",
                                  "Jobs this supervisor moved to another", registry=registry)
        self.store_errors = prom.Counter(
            "poolsup_store_errors", "Failed store calls, by loop and kind", ["loop", "kind"],
            registry=registry)
        self.schedule_ticks = prom.Counter(
            "poolsup_schedule_ticks", "Schedule ticks this supervisor fired, by schedule and "
            "outcome (dispatched, skipped, applied, error)", ["schedule", "outcome"],
            registry=registry)
        self.loop_restarts = prom.Counter(
            "poolsup_loop_restarts", "Background loops restarted after an unexpected "
            "exception, by loop", ["loop"], registry=registry)
        self.failover_held = prom.Gauge(
            "poolsup_store_failover_held", "1 while the store holds every claim after its "
            "master changed (the lock-delay), as this supervisor's last claim saw it",
            registry=registry)
        self.paused = prom.Gauge(
            "poolsup_paused", "1 while no supervisor claims jobs of this handler (\"*\": the "
            "whole pool), read every 5 s", ["handler"], registry=registry)
        self.tasks = prom.Gauge(
            "poolsup_event_loop_tasks", "Tasks of the supervisor's event loop (one per running "
            "job, plus the background loops and what is in flight), read every 5 s",
            registry=registry)
        about = prom.Info("poolsup_supervisor", "This supervisor", registry=registry)
        about.info({"id": supervisor})
        self._server = serve_http(host, port, prom.make_wsgi_app(registry))
        log.info("metrics on http://%s:%d/metrics (and /healthz, /readyz)", host, port)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


metrics = Metrics()


def serve_http(host: str, port: int, metrics_app: Any) -> Any:
    """A threaded HTTP server on host:port for /metrics, /healthz and /readyz, serving
    from a daemon thread of its own."""
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from prometheus_client.exposition import ThreadingWSGIServer

    class Server(ThreadingWSGIServer):
        address_family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]

    class QuietHandler(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    def app(environ: dict[str, Any], start_response: Any) -> Any:
        path = environ.get("PATH_INFO", "")
        if path in ("/healthz", "/readyz"):
            problem = health.liveness() if path == "/healthz" else health.readiness()
            status = "200 OK" if problem is None else "503 Service Unavailable"
            start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
            return [("ok" if problem is None else problem).encode() + b"\n"]
        return metrics_app(environ, start_response)

    server = make_server(host, port, app, Server, handler_class=QuietHandler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
