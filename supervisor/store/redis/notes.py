"""The Redis store's notifications: a list per job (`notes:<key>`), its messages
numbered by the count of those acknowledged before them (lua/_lib.lua notes_acked)."""

from __future__ import annotations

from typing import cast

from supervisor.errors import JobNotFound
from supervisor.store.records import FINISHED_STATES, Lease, Note
from supervisor.store.redis.connection import translated_errors
from supervisor.store.redis.context import RedisPart


class RedisNotes(RedisPart):
    async def notify(self, key: str, payload: bytes) -> None:
        k = self._ctx.keys
        try:
            await self._ctx.run(
                "notify", [k.job(key), k.notes(key)], [key, payload, k.channel], subject=key
            )
        except JobNotFound:
            # The script refuses a finished job as it does an unknown key: say which.
            with translated_errors(self._ctx.where):
                state = cast(bytes | None, await self._ctx.client.hget(k.job(key), "state"))
            if state is None or state.decode() not in FINISHED_STATES:
                raise
            raise JobNotFound(f"job {key!r} has finished ({state.decode()})") from None

    async def take_notifications(self, lease: Lease, after: int = 0) -> list[Note]:
        k = self._ctx.keys
        (notes,) = await self._ctx.run(
            "take-notifications",
            [k.job(lease.key), k.notes(lease.key)],
            [lease.token, lease.owner, after],
            subject=lease.key,
        )
        return [Note(seq=int(seq), payload=payload) for seq, payload in notes]

    async def ack_notifications(self, lease: Lease, upto: int) -> None:
        k = self._ctx.keys
        await self._ctx.run(
            "ack-notifications",
            [k.job(lease.key), k.notes(lease.key)],
            [lease.token, lease.owner, upto],
            subject=lease.key,
        )
