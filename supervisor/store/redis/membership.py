"""The Redis store's membership: a supervisor joins (`sup`, `seen`) and leaves
(lua/register-2.lua, lua/deregister-2.lua); its renewals keep it seen (leases.py), and
`members` reads who is live (reads.py)."""

from __future__ import annotations

from supervisor.store.members import encode_info
from supervisor.store.records import SupervisorInfo
from supervisor.store.redis.context import RedisPart


class RedisMembership(RedisPart):
    async def register(self, info: SupervisorInfo) -> None:
        k = self._ctx.keys
        await self._ctx.run("register", [k.supervisors, k.seen],
                            [info.id, info.instance, encode_info(info)], subject=info.id)

    async def deregister(self, supervisor_id: str, instance: str) -> None:
        k = self._ctx.keys
        await self._ctx.run("deregister", [k.supervisors, k.seen], [supervisor_id, instance],
                            subject=supervisor_id)
