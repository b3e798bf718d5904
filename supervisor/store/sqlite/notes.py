"""The SQLite store's notifications, as steps of a transaction: a note kept for a live
job, taken and acknowledged under the job's lease."""

from __future__ import annotations

from supervisor.errors import JobNotFound
from supervisor.store.records import LIVE_STATES, Lease, Note
from supervisor.store.sqlite import leases
from supervisor.store.sqlite.db import Tx


def notify(tx: Tx, key: str, payload: bytes, cutoff: float) -> None:
    state = tx.value("job_state", key=key, cutoff=cutoff)
    if state is None:
        raise JobNotFound(f"no job has the key {key!r}")
    if state not in LIVE_STATES:
        raise JobNotFound(f"job {key!r} has finished ({state})")
    tx.run("add_note", key=key, payload=payload)
    leases.emit(tx, "notify", key)


def take(tx: Tx, lease: Lease, after: int) -> list[Note]:
    rows = tx.rows("take_notes", key=lease.key, owner=lease.owner, token=lease.token,
                   after=after)
    return [Note(seq=row["id"], payload=bytes(row["payload"])) for row in rows]


def acknowledge(tx: Tx, lease: Lease, upto: int) -> None:
    tx.run("ack_notes", key=lease.key, owner=lease.owner, token=lease.token, upto=upto)
