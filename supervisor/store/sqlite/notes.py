"""The SQLite store's notifications: a note kept for a live job, taken and acknowledged
under the job's lease."""

from __future__ import annotations

from supervisor.errors import JobNotFound
from supervisor.store.records import LIVE_STATES, Lease, Note
from supervisor.store.sqlite import leases
from supervisor.store.sqlite.context import SqlitePart
from supervisor.store.sqlite.db import Tx


class SqliteNotes(SqlitePart):
    async def notify(self, key: str, payload: bytes) -> None:
        def work(tx: Tx) -> None:
            state = tx.value("job_state", key=key, cutoff=self._ctx.cutoff(tx))
            if state is None:
                raise JobNotFound(f"no job has the key {key!r}")
            if state not in LIVE_STATES:
                raise JobNotFound(f"job {key!r} has finished ({state})")
            tx.run("add_note", key=key, payload=payload)
            leases.emit(tx, "notify", key)

        await self._ctx.db.write(work)

    async def take_notifications(self, lease: Lease, after: int = 0) -> list[Note]:
        def work(tx: Tx) -> list[Note]:
            rows = tx.rows("take_notes", key=lease.key, owner=lease.owner, token=lease.token,
                           after=after)
            return [Note(seq=row["id"], payload=bytes(row["payload"])) for row in rows]

        return await self._ctx.db.read(work)

    async def ack_notifications(self, lease: Lease, upto: int) -> None:
        await self._ctx.db.write(lambda tx: tx.run(
            "ack_notes", key=lease.key, owner=lease.owner, token=lease.token, upto=upto))
