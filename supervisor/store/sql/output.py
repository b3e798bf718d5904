"""The SQL stores' side of `poolsup logs`: a row per run in `output_runs` and its kept
bytes in `output_chunks`, each chunk at most CHUNK bytes and starting at its offset in
what the run printed.  A write fills up the last chunk (rewriting at most CHUNK bytes),
then adds chunks; chunks that end before the newest max_bytes are deleted whole, so
nothing kept is ever copied to make room (a run holds at most max_bytes + CHUNK).  The
Redis store keeps the same per run in a string (redis/output.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from supervisor.errors import JobNotFound, StaleToken
from supervisor.store.records import Lease, RunOutput
from supervisor.store.sql.context import SqlPart
from supervisor.store.sql.tx import Tx

CHUNK = 65536


class SqlOutput(SqlPart):
    async def append_output(self, lease: Lease, attempt: int, data: bytes, *, at: int,
                            max_bytes: int, ended: bool = False) -> None:
        async def work(tx: Tx) -> None:
            job = await tx.row("output_job", key=lease.key, cutoff=self._ctx.cutoff(tx))
            if job is None:
                raise JobNotFound(f"no job has the key {lease.key!r}")
            run = await tx.row("output_run", key=lease.key, token=lease.token)
            if run is None and (job["state"] != "running" or job["token"] != lease.token):
                raise StaleToken(f"job {lease.key!r}: token {lease.token} is not a run of "
                                 "its current dispatch")
            total = 0 if run is None else run["total"]
            where = {"key": lease.key, "token": lease.token}
            if at > total:  # the supervisor dropped the bytes in between
                await tx.run("drop_output_chunks", **where)
                await _add(tx, where, data, at)
                total = at + len(data)
            elif at + len(data) > total:
                await _add(tx, where, data[total - at:], total)
                total = at + len(data)
            await tx.run("drop_output_chunks_before", **where, keep_from=total - max_bytes)
            await tx.run("save_output_run", **where,
                         attempt=attempt if run is None else run["attempt"],
                         supervisor=lease.owner if run is None else run["supervisor"],
                         max_bytes=max_bytes, total=total, ended=ended)

        await self._ctx.db.write(work)

    async def output(self, key: str, offsets: Mapping[int, int] | None = None
                     ) -> list[RunOutput]:
        since = offsets or {}

        async def work(tx: Tx) -> list[RunOutput]:
            job = await tx.row("output_job", key=key, cutoff=self._ctx.cutoff(tx))
            if job is None:
                raise JobNotFound(f"no job has the key {key!r}")
            runs = []
            for run in await tx.rows("output_runs", key=key):
                token, total = run["token"], run["total"]
                first = await tx.value("first_output_chunk", key=key, token=token)
                kept_from = max(total if first is None else first, total - run["max_bytes"])
                start = max(since.get(token, 0), kept_from)
                chunks = await tx.rows("output_chunks", key=key, token=token, start=start)
                data = b"".join(bytes(chunk["data"]) for chunk in chunks)
                if chunks:
                    data = data[start - chunks[0]["at"]:]
                ended = bool(run["ended"]) or job["state"] != "running" or job["token"] != token
                runs.append(RunOutput(
                    token=token, attempt=run["attempt"], supervisor=run["supervisor"],
                    data=data, start=start, kept_from=kept_from, total=total, ended=ended))
            return runs

        return await self._ctx.db.read(work)


async def _add(tx: Tx, where: dict[str, Any], data: bytes, at: int) -> None:
    last = await tx.row("last_output_chunk", **where)
    if last is not None and len(last["data"]) < CHUNK:
        room = CHUNK - len(last["data"])
        await tx.run("extend_output_chunk", **where, at=last["at"],
                     data=bytes(last["data"]) + data[:room])
        data, at = data[room:], at + room
    for start in range(0, len(data), CHUNK):
        await tx.run("add_output_chunk", **where, at=at + start, data=data[start:start + CHUNK])


async def forget(tx: Tx, key: str) -> None:
    """A new dispatch or a retry of the key starts without the output of the runs before."""
    await tx.run("forget_output_runs", key=key)
    await tx.run("forget_output_chunks", key=key)
