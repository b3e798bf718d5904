"""`poolsup schedules` and `poolsup plan`: what the schedules did, and a producer's dry run."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import click

from supervisor.cli.support import config_option, print_json, read_config, reports_errors
from supervisor.cli.support import with_client as run_with_client
from supervisor.errors import PoolsupError, UsageError

if TYPE_CHECKING:
    from supervisor.client import AsyncClient
    from supervisor.core.plans import PlanDiff


@click.command("schedules")
@config_option
@click.option("--json", "as_json", is_flag=True,
              help="print each schedule as JSON (state, ended_at, ended_tick, ...)")
@reports_errors
def schedules_command(config_path: str | None, as_json: bool) -> None:
    """Each schedule's last and next tick, last outcome, and who fired it; `ended`
    (when, by which tick) once its producer ended it."""
    from supervisor.cli.schedule_view import render_schedules_text

    async def action(client: AsyncClient) -> list[dict[str, Any]]:
        return await client.schedules()

    views = run_with_client(config_path, action)
    if as_json:
        print_json(views)
    else:
        click.echo(render_schedules_text(views))


@click.command("plan")
@config_option
@click.argument("name")
@click.option("--json", "as_json", is_flag=True,
              help="print the plan as JSON (start, keep, stop, end_schedule)")
@reports_errors
def plan_command(config_path: str | None, name: str, as_json: bool) -> None:
    """Run schedule NAME's producer once, in a sandbox, and print what it would start,
    stop and keep, and whether it would end the schedule.  Changes nothing.  Exit 2 if
    NAME is not a producer schedule."""
    import anyio
    import orjson

    from supervisor.core.plans import InvalidPlan, parse_plan
    from supervisor.forks.launch import open_fork_server
    from supervisor.pool.producers import ProducerFailed, producer_handlers, run_producer
    from supervisor.sandbox_config import protected_paths

    config = read_config(config_path)
    schedule = config.schedules.get(name)
    if schedule is None or schedule.producer is None:
        producers = ", ".join(n for n, s in config.schedules.items() if s.producer) or "none"
        raise UsageError(f"no producer schedule {name!r} (producer schedules: {producers})")

    async def produce() -> Any:
        producer = producer_handlers({name: schedule},
                                     protected_paths(config.path, config.pool.store))
        async with open_fork_server(producer) as fork_server:
            try:
                return await run_producer(fork_server, schedule, tick=time.time(),
                                          max_result=config.pool.max_result)
            except ProducerFailed as error:  # its error may run over several lines
                first = str(error).strip().splitlines()[0]
                raise PoolsupError(f"schedule {name}: {first}") from None

    value = anyio.run(produce)
    try:
        plan = parse_plan(value, handlers=config.handlers, max_payload=config.pool.max_payload)
    except InvalidPlan as error:
        raise PoolsupError(f"schedule {name}: the producer's plan is invalid: {error}") from None

    async def action(client: AsyncClient) -> PlanDiff:
        return await client.plan_diff(name, plan)

    diff: PlanDiff = run_with_client(config_path, action)
    if as_json:
        print_json({
            "schedule": name,
            "start": [{"key": job.key, "handler": job.handler,
                       "payload": orjson.loads(job.payload)} for job in diff.start],
            "keep": list(diff.keep),
            "stop": list(diff.stop),
            "end_schedule": plan.end_schedule,
        })
        return
    ends = ", then end the schedule" if plan.end_schedule else ""
    click.echo(f"plan of schedule {name}: {len(diff.start)} to start, {len(diff.keep)} to keep, "
               f"{len(diff.stop)} to stop{ends} (dry run: nothing changed)")
    for job in diff.start:
        click.echo(f"start  {job.key} ({job.handler})")
    for key in diff.keep:
        click.echo(f"keep   {key}")
    for key in diff.stop:
        click.echo(f"stop   {key}")
