"""The CLI starts fast (`poolsup --help` under 0.15 s: bench/README.md, "Targets") because
`--help` imports only click and the command definitions: not the client, the stores,
their drivers or the supervisor.  This checks what is imported, not how long it takes."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("redis", "anyio", "asyncio", "psutil", "orjson", "logging", "supervisor.client",
         "supervisor.config", "supervisor.store", "supervisor.service", "supervisor.web",
         "supervisor.pool", "supervisor.job", "supervisor.forks", "sandbox")

PROBE = """
import sys
from supervisor.cli.main import main
try:
    main(sys.argv[1:] + ["--help"])
except SystemExit:
    pass
sys.stdout.write("\\n--- modules\\n" + "\\n".join(sorted(sys.modules)))
"""


def modules_after(*args: str) -> list[str]:
    """The modules imported by `poolsup ARGS --help`."""
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                          timeout=60, check=True)
    help_text, modules = done.stdout.split("\n--- modules\n")
    assert "Usage:" in help_text
    return modules.splitlines()


def heavy_among(modules: list[str]) -> list[str]:
    return [name for name in modules if name.split(".")[0] in HEAVY
            or any(name == heavy or name.startswith(heavy + ".") for heavy in HEAVY)]


def test_help_imports_no_client_store_or_driver() -> None:
    assert heavy_among(modules_after()) == []


def test_a_command_help_imports_no_client_store_or_driver() -> None:
    assert heavy_among(modules_after("status")) == []


def test_choices_written_out_for_help_match_their_sources() -> None:
    from supervisor.cli import debugging, main
    from supervisor.client import DEBUG_TIMEOUT
    from supervisor.service.log_format import LOG_FORMATS
    from supervisor.store.records import ALL_STATES

    assert main.LOG_FORMATS == LOG_FORMATS
    assert main.ALL_STATES == ALL_STATES
    assert debugging.DEBUG_TIMEOUT == DEBUG_TIMEOUT
