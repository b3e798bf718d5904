"""`poolsup debug KEY`: the running job's Python thread stacks, from any host."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from supervisor.cli.support import config_option, print_json, reports_errors, with_client

if TYPE_CHECKING:
    from supervisor.client import AsyncClient

DEBUG_TIMEOUT = 10.0  # the default of supervisor.client's debug (a unit test keeps them equal)


def render_stacks(answer: dict[str, Any]) -> str:
    """Like a traceback: each thread, its frames outermost first, innermost last."""
    lines = [f"job {answer['key']} (token {answer['token']}, pid {answer['pid']}, "
             f"supervisor {answer['supervisor']})"]
    if "error" in answer:
        lines.append(f"no stacks: {answer['error']}")
        return "\n".join(lines)
    for thread in answer["threads"]:
        lines.append("")
        lines.append(f"Thread {thread['thread']}{' (main)' if thread['main'] else ''}, "
                     "most recent call last:")
        for frame in thread["frames"]:
            lines.append(f'  File "{frame["file"]}", line {frame["line"]}, in '
                         f'{frame["function"]}')
            if frame["code"]:
                lines.append(f"    {frame['code']}")
    return "\n".join(lines)


@click.command("debug")
@config_option
@click.argument("key")
@click.option("--json", "as_json", is_flag=True)
@click.option("--timeout", type=click.FloatRange(min=0.1), default=DEBUG_TIMEOUT,
              show_default=True, help="seconds to wait for the supervisor that runs it")
@reports_errors
def debug_command(config_path: str | None, key: str, as_json: bool, timeout: float) -> None:
    """The running job's Python thread stacks, from whichever host runs it.  Exit 1 if
    it is not running, 4 if unknown."""

    async def action(client: AsyncClient) -> dict[str, Any]:
        return await client.debug(key, timeout)

    answer = with_client(config_path, action)
    if as_json:
        print_json(answer)
    else:
        click.echo(render_stacks(answer))
