"""What of the supervisor's environment reaches the fork server (and so its jobs)."""

from pathlib import Path

from supervisor.config import HandlerConfig
from supervisor.forks.launch import fork_server_environment

ENVIRON = {
    "PATH": "/usr/bin", "LANG": "C.UTF-8", "POOLSUP_STORE": "redis://:secret@db/0",
    "NOTIFY_SOCKET": "/run/systemd/notify", "WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1",
    "LISTEN_FDS": "1", "LISTEN_PID": "1", "LISTEN_FDNAMES": "x", "INVOCATION_ID": "abc",
}
SERVICE_MANAGER_VARIABLES = {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS",
                             "LISTEN_PID", "LISTEN_FDNAMES"}


def handlers(*, inherit_env: bool) -> dict[str, HandlerConfig]:
    return {"h": HandlerConfig(name="h", path=Path("/h.py"), rebalance=False,
                               inherit_env=inherit_env)}


def test_the_minimal_environment_keeps_what_python_needs_and_no_secret() -> None:
    assert fork_server_environment(handlers(inherit_env=False), ENVIRON) == {
        "PATH": "/usr/bin", "LANG": "C.UTF-8",
    }


def test_an_inherited_environment_still_leaves_out_the_service_managers_variables() -> None:
    environment = fork_server_environment(handlers(inherit_env=True), ENVIRON)
    assert not SERVICE_MANAGER_VARIABLES & environment.keys()
    assert environment["POOLSUP_STORE"] == ENVIRON["POOLSUP_STORE"]
    assert environment["INVOCATION_ID"] == "abc"
