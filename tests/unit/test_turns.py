"""The SQL stores' turns at their connections: arrival order, a renewal first, and a
cancelled waiter that neither keeps nor loses a slot."""

from __future__ import annotations

import anyio

from supervisor.store.turns import Turns


def test_a_call_that_goes_first_overtakes_every_call_waiting() -> None:
    order: list[str] = []

    async def main() -> None:
        turns = Turns(1)
        release = anyio.Event()

        async def call(name: str, *, first: bool = False) -> None:
            async with turns.turn(first=first):
                order.append(name)
                if name == "holder":
                    await release.wait()

        async with anyio.create_task_group() as group:
            group.start_soon(call, "holder")
            await anyio.sleep(0.01)
            for n in range(3):
                group.start_soon(call, f"complete-{n}")
                await anyio.sleep(0.001)
            group.start_soon(lambda: call("renewal", first=True))
            await anyio.sleep(0.01)
            release.set()

    anyio.run(main)
    assert order == ["holder", "renewal", "complete-0", "complete-1", "complete-2"]


def test_a_cancelled_waiter_leaves_the_slots_as_they_were() -> None:
    async def main() -> int:
        turns = Turns(2)
        entered = 0
        with anyio.move_on_after(0.05):
            async with turns.turn(), turns.turn(), turns.turn():  # the third waits
                pass
        async with anyio.create_task_group() as group:
            async def call() -> None:
                nonlocal entered
                async with turns.turn():
                    entered += 1
                    await anyio.sleep(0.01)
            for _ in range(4):
                group.start_soon(call)
        return entered

    assert anyio.run(main) == 4
