"""What every `poolsup` command shares: the config option, the client, and the one place
where error types become exit codes.

The command modules import the client, the config, the stores and their drivers (anyio,
redis, orjson) inside the commands that use them, not at the top: `poolsup --help` and
every command's start would pay for all of them otherwise
(tests/acceptance/test_cli_imports.py).
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Any, TypeVar

import click

from supervisor.errors import PoolsupError

if TYPE_CHECKING:
    from supervisor.client import AsyncClient
    from supervisor.config import Config

F = TypeVar("F", bound=Callable[..., Any])

config_option = click.option(
    "-c", "--config", "config_path", default=None, metavar="FILE",
    help="pool.toml (default: $POOLSUP_CONFIG, then ./pool.toml)",
)


class OneLineUsageError(click.UsageError):
    """A usage error shown as every poolsup error is: one line on stderr, exit 2."""

    def show(self, file: IO[Any] | None = None) -> None:
        hint = f" (see {self.ctx.command_path} --help)" if self.ctx is not None else ""
        click.echo(f"poolsup: {self.format_message().rstrip('.')}{hint}", err=True)


@contextlib.contextmanager
def usage_errors_on_one_line() -> Iterator[None]:
    try:
        yield
    except (OneLineUsageError, click.exceptions.NoArgsIsHelpError):
        raise  # the latter: a bare `poolsup` shows its help, as click does
    except click.UsageError as error:
        raise OneLineUsageError(error.format_message(), error.ctx) from error


class PoolsupGroup(click.Group):
    """The `poolsup` group: click's usage errors (a bad option value, a missing
    argument, an unknown command) come out as one line, not click's usage text."""

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        with usage_errors_on_one_line():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        with usage_errors_on_one_line():
            return super().invoke(ctx)


def fail(error: PoolsupError) -> None:
    click.echo(f"poolsup: {error.message}", err=True)
    sys.exit(error.exit_code)


def reports_errors(command: F) -> F:
    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except PoolsupError as error:
            fail(error)
        except BaseExceptionGroup as group:
            # Task groups wrap what their tasks raise; report ours like any other.
            wrapped = first_poolsup_error(group)
            if wrapped is None:
                raise
            fail(wrapped)
        except KeyboardInterrupt:
            sys.exit(130)
    return wrapper  # type: ignore[return-value]


def first_poolsup_error(group: BaseExceptionGroup[BaseException]) -> PoolsupError | None:
    for error in group.exceptions:
        if isinstance(error, PoolsupError):
            return error
        if isinstance(error, BaseExceptionGroup):
            found = first_poolsup_error(error)
            if found is not None:
                return found
    return None


def read_config(config_path: str | None, *, require_handlers: bool = False) -> Config:
    from supervisor.config import load_config, resolve_config_path

    return load_config(resolve_config_path(config_path), require_handlers=require_handlers)


def with_client(config_path: str | None, action: Callable[[AsyncClient], Any]) -> Any:
    import anyio

    from supervisor.client import client_for

    config = read_config(config_path)

    async def main() -> Any:
        client = client_for(config)
        try:
            return await action(client)
        finally:
            with anyio.CancelScope(shield=True):
                await client.close()

    return anyio.run(main)


def print_json(value: Any) -> None:
    import orjson

    click.echo(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())
