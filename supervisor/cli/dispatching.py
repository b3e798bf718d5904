"""`poolsup dispatch`: one job (optionally waiting for its end), or many from a JSONL file."""

from __future__ import annotations

import os
import sys
import time
from typing import IO, TYPE_CHECKING, Any

import click

from supervisor.cli.outcomes import TIMEOUT_HELP, check_timeout, report_end
from supervisor.cli.support import config_option, print_json, reports_errors, with_client
from supervisor.errors import DispatchRefused, UsageError
from supervisor.observe.trace_context import from_environ

if TYPE_CHECKING:
    from supervisor.client import AsyncClient

# The options of one job (and their parameters), which a --from-file line gives for itself.
ONE_JOB_OPTIONS = {"--payload": "payload", "--payload-file": "payload_file",
                   "--max-attempts": "max_attempts", "--in": "in_seconds", "--at": "at_time",
                   "--priority": "priority", "--group": "group", "--unique-for": "unique_for",
                   "--wait": "wait", "--timeout": "timeout"}


@click.command("dispatch")
@config_option
@click.argument("key", required=False)
@click.option("--handler", "-H", default=None,
              help="handler name (optional with one handler; with --from-file, the default)")
@click.option("--payload", default=None, help="JSON payload")
@click.option("--payload-file", type=click.File("rb"), default=None,
              help="read the JSON payload from a file, or - for stdin")
@click.option("--max-attempts", type=int, default=None)
@click.option("--in", "in_seconds", default=None, metavar="SECONDS",
              help="start no sooner than this many seconds from now")
@click.option("--at", "at_time", default=None, metavar="TIME",
              help="start no sooner than this ISO 8601 time (local time without an offset)")
@click.option("--priority", type=int, default=None, metavar="0-9",
              help="higher runs first within its handler (default 0)")
@click.option("--group", default=None, metavar="G",
              help="the group that the handler's max_running_per_group counts")
@click.option("--unique-for", type=float, default=None, metavar="SECONDS",
              help="refuse (exit 3) if the key finished within this many seconds")
@click.option("--wait", is_flag=True, help="wait for the job to end; exit 0, 5, 6 or 7")
@click.option("--timeout", type=float, default=None, metavar="S", help=TIMEOUT_HELP)
@click.option("--from-file", "from_file", default=None, metavar="F",
              help="add many jobs: one JSON object a line, or - for stdin")
@click.option("--json", "as_json", is_flag=True,
              help="print the job record as JSON (with --from-file, the results)")
@reports_errors
def dispatch_command(
    config_path: str | None, key: str | None, handler: str | None, payload: str | None,
    payload_file: Any, max_attempts: int | None, in_seconds: str | None, at_time: str | None,
    priority: int | None, group: str | None, unique_for: float | None, wait: bool,
    timeout: float | None, from_file: str | None, as_json: bool,
) -> None:
    """Add a job (exit 3 if refused: its key is live, ...), or many with --from-file
    (exit 3 if some were refused, each listed on stderr)."""
    from supervisor.client import parse_payload
    from supervisor.run_at import format_time, run_at_from

    if from_file is not None:
        given = click.get_current_context().params
        clashing = [option for option, name in ONE_JOB_OPTIONS.items()
                    if given[name] not in (None, False)]
        if key is not None or clashing:
            raise UsageError(f"--from-file takes each job's key and options from its line, "
                             f"not {' '.join(clashing) or 'a KEY'}")
        _dispatch_file(config_path, from_file, handler, as_json)
        return
    if key is None:
        raise UsageError("give a job KEY, or --from-file")
    if payload is not None and payload_file is not None:
        raise UsageError("give --payload or --payload-file, not both")
    if timeout is not None and not wait:
        raise UsageError("--timeout goes with --wait")
    check_timeout(timeout)
    run_at = run_at_from(in_seconds, at_time, now=time.time())
    text: bytes = b"null"
    if payload is not None:
        text = payload.encode()
    elif payload_file is not None:
        text = payload_file.read()

    async def action(client: AsyncClient) -> dict[str, Any]:
        client.trace_fallback = from_environ(os.environ)  # docs/tracing.md
        data = parse_payload(text, client.max_payload)
        record = await client.dispatch_json(
            key, data, handler=handler, max_attempts=max_attempts, run_at=run_at,
            priority=0 if priority is None else priority, group=group,
            unique_for=0.0 if unique_for is None else unique_for)
        return await client.wait(key, timeout) if wait else record

    record = with_client(config_path, action)
    if wait:
        report_end(record, as_json)
    elif as_json:
        print_json(record)
    else:
        when = "" if run_at is None else f", not before {format_time(run_at)}"
        click.echo(f"dispatched {record['key']} ({record['handler']}{when})")


def _dispatch_file(config_path: str | None, path: str, handler: str | None,
                   as_json: bool) -> None:
    from supervisor.bulk import read_jsonl

    name = "stdin" if path == "-" else path
    try:
        source: IO[bytes] = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
        with source:
            items = read_jsonl(source, name)
    except OSError as error:
        raise UsageError(f"cannot read {name}: {error.strerror or error}") from None
    if handler is not None:
        for _, item in items:
            item.setdefault("handler", handler)

    async def action(client: AsyncClient) -> list[dict[str, Any]]:
        client.trace_fallback = from_environ(os.environ)  # docs/tracing.md
        requests = []
        for number, item in items:  # all checked before any is sent
            try:
                requests.append(client.item_request(item))
            except UsageError as error:
                raise UsageError(f"{name}:{number}: {error.message}") from None
        return await client.dispatch_requests(requests)

    results = with_client(config_path, action)
    refused = [result for result in results if not result["added"]]
    if as_json:
        print_json(results)
    else:
        click.echo(f"dispatched {len(results) - len(refused)} of {len(results)} job(s)")
    for result in refused:
        click.echo(f"{result['key']}: {result['error']}", err=True)
    if refused:
        raise DispatchRefused(f"{len(refused)} of {len(results)} job(s) refused")
