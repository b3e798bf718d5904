"""A handler that shows what its process imported of OpenTelemetry (this file imports
none of it)."""

import sys


def otel_modules(job):
    return sorted(name for name in sys.modules if name.startswith("opentelemetry"))
