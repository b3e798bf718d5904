"""`poolsup pause` and `poolsup resume`: no supervisor claims jobs of the named handlers
(none named: of the whole pool) until resumed; running jobs go on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from supervisor.cli.support import config_option, reports_errors, with_client

if TYPE_CHECKING:
    from supervisor.client import AsyncClient


def _described(handlers: Sequence[str]) -> str:
    return "the pool" if not handlers else ", ".join(handlers)


@click.command("pause")
@config_option
@click.argument("handlers", nargs=-1)
@reports_errors
def pause_command(config_path: str | None, handlers: tuple[str, ...]) -> None:
    """No supervisor claims jobs of HANDLERS (none named: the whole pool) until resumed."""

    async def action(client: AsyncClient) -> None:
        await client.pause(list(handlers))

    with_client(config_path, action)
    click.echo(f"paused {_described(handlers)}")


@click.command("resume")
@config_option
@click.argument("handlers", nargs=-1)
@reports_errors
def resume_command(config_path: str | None, handlers: tuple[str, ...]) -> None:
    """Undo `pause` of HANDLERS (none named: of the whole pool)."""

    async def action(client: AsyncClient) -> None:
        await client.resume(list(handlers))

    with_client(config_path, action)
    click.echo(f"resumed {_described(handlers)}")
