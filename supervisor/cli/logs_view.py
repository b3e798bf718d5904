"""`poolsup logs KEY`: what each run of a job printed, from any host, while it runs and
after; `--follow` prints on as output comes, until the job has finished."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from supervisor.cli.support import config_option, reports_errors, with_client

if TYPE_CHECKING:
    from supervisor.client import AsyncClient
    from supervisor.store.records import RunOutput

FOLLOW_POLL = 0.5


def header(run: RunOutput) -> str:
    """One line before a run's output: its attempt, supervisor and token, and how many of
    its first bytes are no longer kept."""
    line = f"--- attempt {run.attempt}, supervisor {run.supervisor}, token {run.token}"
    if run.kept_from:
        line += f" (... {run.kept_from} bytes not kept)"
    return line + " ---\n"


class Printer:
    """Writes runs' bytes as they are, a header before each new run, and a newline
    before a header when the output before it did not end with one."""

    def __init__(self) -> None:
        self._shown: set[int] = set()
        self._current: int | None = None
        self._at_line_start = True

    def show(self, run: RunOutput) -> None:
        out = sys.stdout.buffer
        if run.token != self._current:
            if not self._at_line_start:
                out.write(b"\n")
            if run.token not in self._shown:
                out.write(header(run).encode())
            self._shown.add(run.token)
            self._current = run.token
            self._at_line_start = True
        if run.data:
            out.write(run.data)
            self._at_line_start = run.data.endswith(b"\n")
        out.flush()


@click.command("logs")
@config_option
@click.argument("key")
@click.option("--follow", "-f", is_flag=True,
              help="print new output as it comes, until the job has finished")
@click.option("--attempt", type=click.IntRange(min=1), default=None,
              help="only this attempt's output")
@reports_errors
def logs_command(config_path: str | None, key: str, follow: bool, attempt: int | None) -> None:
    """The job's stdout and stderr, the newest max_log bytes of each attempt (each run:
    an attempt released by a drain or a move shows once per supervisor that ran it).
    Exit 4 if the key is unknown, or if the attempt has no output (with --follow: once
    the job has finished without it)."""
    printer = Printer()

    async def show(client: AsyncClient) -> None:
        runs = await client.output_runs(key, attempt)
        for run in runs:
            printer.show(run)
        if not runs:
            click.echo(f"poolsup: job {key!r} has no output kept (none printed yet, or "
                       "max_log = 0)", err=True)

    async def follow_on(client: AsyncClient) -> None:
        import anyio

        follower = await client.output_follower(key, attempt)
        while True:
            runs, finished = await follower.read()
            for run in runs:
                printer.show(run)
            if finished:
                return
            await anyio.sleep(FOLLOW_POLL)

    with_client(config_path, follow_on if follow else show)
