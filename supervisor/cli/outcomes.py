"""`poolsup wait` and `poolsup retry`: a job's end as an exit code, and running it again."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from supervisor.cli.support import config_option, print_json, reports_errors, with_client
from supervisor.errors import JobFailed, JobStopped, UsageError

if TYPE_CHECKING:
    from supervisor.client import AsyncClient

TIMEOUT_HELP = "give up after this many seconds (exit 7; the job goes on)"


def check_timeout(timeout: float | None) -> None:
    if timeout is not None and not timeout >= 0:
        raise UsageError(f"--timeout must be 0 or more seconds (got {timeout!r})")


def first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0] if lines else ""


def report_end(record: dict[str, Any], as_json: bool) -> None:
    """Print an ended job (its record with `as_json`, else a succeeded job's result) and
    raise for the exit code of a failed (5) or stopped (6) one."""
    if as_json:
        print_json(record)
    elif record["state"] == "succeeded":
        import orjson

        click.echo(orjson.dumps(record["result"]).decode())
    key, why = record["key"], first_line(record["error"])
    if record["state"] == "failed":
        raise JobFailed(f"job {key!r} failed after {record['attempts']} attempt(s): "
                        f"{why or 'no error recorded'}")
    if record["state"] == "stopped":
        raise JobStopped(f"job {key!r} was stopped: {why or 'no reason recorded'}")


@click.command("wait")
@config_option
@click.argument("key")
@click.option("--timeout", type=float, default=None, metavar="S", help=TIMEOUT_HELP)
@click.option("--json", "as_json", is_flag=True, help="print the job's record as JSON")
@reports_errors
def wait_command(config_path: str | None, key: str, timeout: float | None,
                 as_json: bool) -> None:
    """Wait for a job to end and print its result.  Exit 0 succeeded, 5 failed,
    6 stopped, 7 still live when --timeout ran out, 4 unknown key."""
    check_timeout(timeout)

    async def action(client: AsyncClient) -> dict[str, Any]:
        return await client.wait(key, timeout)

    report_end(with_client(config_path, action), as_json)


@click.command("retry")
@config_option
@click.argument("key")
@click.option("--json", "as_json", is_flag=True, help="print the job's record as JSON")
@reports_errors
def retry_command(config_path: str | None, key: str, as_json: bool) -> None:
    """Run a failed or stopped job again: same handler and payload, attempts from 1.
    Exit 3 if it is live or succeeded, 4 if unknown."""

    async def action(client: AsyncClient) -> dict[str, Any]:
        return await client.retry(key)

    record = with_client(config_path, action)
    if as_json:
        print_json(record)
    else:
        click.echo(f"retried {record['key']} ({record['handler']}): {record['state']}")
