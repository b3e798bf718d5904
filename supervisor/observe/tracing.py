"""Whether this supervisor traces its jobs (docs/tracing.md), decided once at its start.

Tracing is on when the environment configures the OpenTelemetry SDK's trace exporter with
its standard variables: `OTEL_TRACES_EXPORTER` names an exporter other than `none`, or an
OTLP endpoint is given (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`),
and `OTEL_SDK_DISABLED` is not `true`.  `OTEL_SERVICE_NAME`, the sampler, headers and the
batch processor's settings alone do not turn it on (they are read once it is).  Off,
nothing of OpenTelemetry is imported here and a job spends nothing on it: the job's way
asks `JobServices.tracing`, which is None.

On, `open_tracing` imports the SDK (`observe/otel.py`, the `otel` extra); without the
extra installed it says so once and the supervisor runs untraced.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from supervisor.observe.otel import Tracing

log = logging.getLogger("poolsup")

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def tracing_wanted(environ: Mapping[str, str]) -> bool:
    """The rule above, over the environment's values."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters:
        return exporters != "none"
    return any(environ.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def open_tracing(environ: Mapping[str, str], supervisor_id: str) -> Tracing | None:
    """The supervisor's tracing if its environment asks for it and the SDK is installed."""
    if not tracing_wanted(environ):
        return None
    try:
        from supervisor.observe.otel import Tracing
    except ImportError as error:
        log.warning("OTEL_* variables ask for traces, but the OpenTelemetry SDK is not "
                    "installed (pip install 'poolsup[otel]'): jobs are not traced (%s)", error)
        return None
    try:
        tracing = Tracing.start(environ, supervisor_id)
    except Exception as error:  # an unknown exporter name, a bad sampler argument
        log.warning("tracing not started: %s", error)
        return None
    log.info("tracing jobs to %s", tracing.destination)
    return tracing
