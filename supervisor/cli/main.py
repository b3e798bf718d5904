"""The `poolsup` command line.  Error types map to exit codes in `supervisor/cli/support.py`."""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from typing import TYPE_CHECKING, Any

import click

from supervisor.cli.debugging import debug_command
from supervisor.cli.dispatching import dispatch_command
from supervisor.cli.logs_view import logs_command
from supervisor.cli.outcomes import retry_command, wait_command
from supervisor.cli.pausing import pause_command, resume_command
from supervisor.cli.schedules import plan_command, schedules_command
from supervisor.cli.support import (
    PoolsupGroup,
    config_option,
    print_json,
    read_config,
    reports_errors,
    with_client,
)

if TYPE_CHECKING:
    from supervisor.client import AsyncClient

# The choices of `run --log-format` and `jobs --state`, written out so that `--help` imports
# neither logging nor the stores (tests/acceptance/test_cli_imports.py checks they match
# supervisor.service.log_format.LOG_FORMATS and supervisor.store.records.ALL_STATES).
LOG_FORMATS = ("text", "json")
ALL_STATES = ("pending", "running", "succeeded", "failed", "stopped")
WEB_EXTRA_MODULES = ("starlette", "uvicorn", "jinja2")
WEB_TOKEN_ENV = "POOLSUP_WEB_TOKEN"


@click.group(cls=PoolsupGroup)
@click.version_option(package_name="poolsup")
def main() -> None:
    """poolsup: a per-host supervisor for durable, keyed jobs."""


@main.command()
@config_option
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
@click.option("--log-format", default="text", show_default=True, type=click.Choice(LOG_FORMATS),
              help="json: one object per line (time, level, logger, message, key, token)")
@reports_errors
def run(config_path: str | None, log_level: str, log_format: str) -> None:
    """Run the supervisor in the foreground until SIGTERM/SIGINT."""
    import anyio

    from sandbox import linux
    from supervisor.cli.sandbox_report import check_sandboxes
    from supervisor.service.daemon import serve
    from supervisor.service.logs import logging_to_stderr

    config = read_config(config_path, require_handlers=True)
    check_sandboxes(config)
    # A job can read /proc/PID/environ of any process of its user (Landlock's ptrace
    # rule covers only attaching), and ours may hold the store's password.
    with contextlib.suppress(OSError, ValueError, IndexError):
        linux.hide_startup_environment()
    # Until the supervisor's own handler is in place, a reload request must not kill it.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    with logging_to_stderr(log_level, log_format):
        code = anyio.run(serve, config)
    sys.exit(code)


@main.command()
@config_option
@reports_errors
def check(config_path: str | None) -> None:
    """Validate the config and import every handler."""
    import anyio

    from supervisor.cli.sandbox_report import check_sandboxes, kernel_lines
    from supervisor.forks.launch import open_fork_server
    from supervisor.pool.producers import sandboxed_code
    from supervisor.store import check_url

    config = read_config(config_path, require_handlers=True)
    check_url(config.pool.store)
    kernel = check_sandboxes(config)
    code = sandboxed_code(config)

    async def import_handlers() -> dict[str, str | None]:
        async with open_fork_server(code) as fork_server:
            return fork_server.handler_errors

    errors = anyio.run(import_handlers)
    broken = {name: error for name, error in errors.items() if error}
    for name, error in broken.items():
        last_line = error.strip().splitlines()[-1] if error.strip() else "unknown error"
        path = code[name].path
        click.echo(f"poolsup: handler {name} ({path}) cannot run: {last_line}", err=True)
    if broken:
        sys.exit(2)
    schedules = f", {len(config.schedules)} schedule(s)" if config.schedules else ""
    for line in kernel_lines(kernel):
        click.echo(line)
    click.echo(f"ok: pool {config.pool.name}, {len(config.handlers)} handler(s){schedules}")


@main.command()
@config_option
@click.argument("key")
@click.option("--no-wait", is_flag=True, help="return once the stop is requested")
@reports_errors
def stop(config_path: str | None, key: str, no_wait: bool) -> None:
    """Stop a job wherever it runs (remove it if pending).  Exit 4 if unknown."""

    async def action(client: AsyncClient) -> dict[str, Any]:
        return await client.stop(key, wait=not no_wait)

    record = with_client(config_path, action)
    if record["state"] == "running":  # --no-wait: its processes are still going
        click.echo(f"{record['key']}: running, stop requested")
    else:
        click.echo(f"{record['key']}: {record['state']}")


@main.command()
@config_option
@click.argument("key")
@click.option("--payload", required=True, help="JSON message")
@reports_errors
def notify(config_path: str | None, key: str, payload: str) -> None:
    """Deliver a message to a job (kept until it runs, if pending)."""
    from supervisor.client import parse_payload

    async def action(client: AsyncClient) -> None:
        await client.notify_json(key, parse_payload(payload, client.max_payload))

    with_client(config_path, action)
    click.echo(f"notified {key}")


@main.command()
@config_option
@click.option("--json", "as_json", is_flag=True)
@click.option("--watch", is_flag=True, help="refresh every second until interrupted")
@reports_errors
def status(config_path: str | None, as_json: bool, watch: bool) -> None:
    """The pool at a glance.  Exit 1 if the store is unreachable."""
    import anyio

    from supervisor.cli.status import render_status_text

    async def show(client: AsyncClient) -> None:
        while True:
            snapshot = await client.status()
            if as_json:
                print_json(snapshot)
            else:
                if watch:
                    click.clear()
                click.echo(render_status_text(snapshot))
            if not watch:
                return
            await anyio.sleep(1.0)

    with_client(config_path, show)


@main.command()
@config_option
@click.option("--state", type=click.Choice(ALL_STATES), default=None)
@click.option("--json", "as_json", is_flag=True)
@reports_errors
def jobs(config_path: str | None, state: Any, as_json: bool) -> None:
    """List jobs."""

    async def action(client: AsyncClient) -> list[dict[str, Any]]:
        return await client.jobs(state)

    records = with_client(config_path, action)
    if as_json:
        print_json(records)
        return
    now = time.time()
    click.echo(f"{'KEY':<32} {'HANDLER':<16} {'STATE':<10} {'TRIES':>5} {'AGE':>8}  ERROR")
    for record in records:
        age = f"{now - record['created_at']:.0f}s"
        error = (record["error"] or "").splitlines()[0][:60] if record["error"] else ""
        click.echo(
            f"{record['key'][:32]:<32} {record['handler'][:16]:<16} {record['state']:<10} "
            f"{record['attempts']:>5} {age:>8}  {error}"
        )


@main.command()
@config_option
@click.argument("key")
@click.option("--json", "as_json", is_flag=True)
@reports_errors
def job(config_path: str | None, key: str, as_json: bool) -> None:
    """One job's record.  Exit 4 if unknown."""
    import orjson

    from supervisor.cli.history_view import event_lines

    async def action(client: AsyncClient) -> dict[str, Any]:
        return await client.job(key)

    record = with_client(config_path, action)
    if as_json:
        print_json(record)
        return
    for name, value in record.items():
        if name == "events":
            continue
        if name in ("payload", "result") and value is not None:
            value = orjson.dumps(value).decode()
        click.echo(f"{name + ':':<16}{'' if value is None else value}")
    click.echo("events:")
    for line in event_lines(record["events"]):
        click.echo(f"  {line}")


@main.command()
@config_option
@click.option("--listen", default="127.0.0.1:8080", show_default=True, metavar="HOST:PORT")
@click.option("--token-file", default=None, metavar="FILE",
              help=f"the token browsers must present (default: ${WEB_TOKEN_ENV})")
@click.option("--read-only", is_flag=True, help="no buttons; actions are refused")
@reports_errors
def web(config_path: str | None, listen: str, token_file: str | None, read_only: bool) -> None:
    """The dashboard, until SIGTERM.  Exit 2 for a non-loopback address without a token."""
    try:
        from supervisor.web.serving import run_dashboard
    except ImportError as error:
        if (error.name or "").split(".")[0] not in WEB_EXTRA_MODULES:
            raise
        click.echo("poolsup web needs the web extra: pip install 'poolsup[web]'", err=True)
        sys.exit(2)
    run_dashboard(read_config(config_path), listen=listen, token_file=token_file,
                  read_only=read_only)


main.add_command(dispatch_command)
main.add_command(wait_command)
main.add_command(retry_command)
main.add_command(schedules_command)
main.add_command(plan_command)
main.add_command(pause_command)
main.add_command(debug_command)
main.add_command(logs_command)
main.add_command(resume_command)

