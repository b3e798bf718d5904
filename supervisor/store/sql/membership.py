"""The SQL stores' membership: a supervisor joins and leaves; its renewals keep it seen
(leases.py), and `members` reads who is live (reads.py).  A part of both SQL stores:
context.py."""

from __future__ import annotations

from supervisor.errors import SupervisorIdTaken
from supervisor.store.members import encode_info
from supervisor.store.records import SupervisorInfo
from supervisor.store.sql.context import SqlPart
from supervisor.store.sql.tx import Tx


class SqlMembership(SqlPart):
    async def register(self, info: SupervisorInfo) -> None:
        """Write the membership entry; another instance's entry seen within its lease
        ttl keeps the id."""
        async def work(tx: Tx) -> None:
            entry = await tx.row("supervisor_entry", id=info.id)
            if entry is not None and entry["instance"] != info.instance:
                silent_for = tx.lease_now - entry["last_seen"]
                if silent_for < entry["lease_ttl"]:
                    raise SupervisorIdTaken(
                        f"supervisor id {info.id!r} is taken by a live instance of pool "
                        f"{self._ctx.pool!r} (seen {silent_for:.1f} s ago)")
            await tx.run("upsert_supervisor", id=info.id, instance=info.instance,
                         info=encode_info(info).decode(), lease_ttl=info.lease_ttl)

        await self._ctx.db.write(work)

    async def deregister(self, supervisor_id: str, instance: str) -> None:
        async def work(tx: Tx) -> None:
            await tx.run("delete_supervisor", id=supervisor_id, instance=instance)
            await tx.left(supervisor_id)

        await self._ctx.db.write(work)
