"""The SQL stores' notifications: a note kept for a live job, taken and acknowledged
under the job's lease; the job's holder hears of it (Tx.tell_holder)."""

from __future__ import annotations

from supervisor.errors import JobNotFound
from supervisor.store.records import LIVE_STATES, Lease, Note
from supervisor.store.sql.context import SqlPart
from supervisor.store.sql.tx import Tx


class SqlNotes(SqlPart):
    async def notify(self, key: str, payload: bytes) -> None:
        async def work(tx: Tx) -> None:
            state = await tx.value("job_state", key=key, cutoff=self._ctx.cutoff(tx))
            if state is None:
                raise JobNotFound(f"no job has the key {key!r}")
            if state not in LIVE_STATES:
                raise JobNotFound(f"job {key!r} has finished ({state})")
            await tx.run("add_note", key=key, payload=payload)
            await tx.tell_holder(key, "notify")

        await self._ctx.db.write(work)

    async def take_notifications(self, lease: Lease, after: int = 0) -> list[Note]:
        async def work(tx: Tx) -> list[Note]:
            rows = await tx.rows("take_notes", key=lease.key, owner=lease.owner,
                                 token=lease.token, after=after)
            return [Note(seq=row["id"], payload=bytes(row["payload"])) for row in rows]

        return await self._ctx.db.read(work)

    async def ack_notifications(self, lease: Lease, upto: int) -> None:
        async def work(tx: Tx) -> None:
            await tx.run("ack_notes", key=lease.key, owner=lease.owner, token=lease.token,
                         upto=upto)

        await self._ctx.db.write(work)
