"""The Redis store's notifications: a list per job (`notes:<key>`), its messages
numbered by the count of those acknowledged before them (lua/_lib.lua notes_acked)."""

from __future__ import annotations

from supervisor.store.records import Lease, Note
from supervisor.store.redis.dispatch import RunScript
from supervisor.store.redis.keys import PoolKeys


class RedisNotes:
    def __init__(self, keys: PoolKeys, run: RunScript) -> None:
        self._keys = keys
        self._run = run

    async def notify(self, key: str, payload: bytes) -> None:
        k = self._keys
        await self._run(
            "notify", [k.job(key), k.notes(key)], [key, payload, k.channel], subject=key
        )

    async def take_notifications(self, lease: Lease, after: int = 0) -> list[Note]:
        k = self._keys
        (notes,) = await self._run(
            "take-notifications",
            [k.job(lease.key), k.notes(lease.key)],
            [lease.token, lease.owner, after],
            subject=lease.key,
        )
        return [Note(seq=int(seq), payload=payload) for seq, payload in notes]

    async def ack_notifications(self, lease: Lease, upto: int) -> None:
        k = self._keys
        await self._run(
            "ack-notifications",
            [k.job(lease.key), k.notes(lease.key)],
            [lease.token, lease.owner, upto],
            subject=lease.key,
        )
