"""The Redis store's side of `poolsup logs`: each run's output in a string of its own,
appended to and cut back by lua/append-output-3.lua, with the runs' numbers in one hash
per job (redis/keys.py `output`, `output_run`); lua/output-2+n.lua reads them in one step."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import orjson

from supervisor.errors import StoreError
from supervisor.store.policy import output_slack
from supervisor.store.records import Lease, RunOutput
from supervisor.store.redis.connection import translated_errors
from supervisor.store.redis.context import RedisPart
from supervisor.store.redis.scripts import KEYS_CHANGED_RETRIES, KeysChanged, ScriptArg


class RedisOutput(RedisPart):
    async def append_output(self, lease: Lease, attempt: int, data: bytes, *, at: int,
                            max_bytes: int, ended: bool = False) -> None:
        k = self._ctx.keys
        await self._ctx.run(
            "append-output",
            [k.job(lease.key), k.output(lease.key), k.output_run(lease.key, lease.token)],
            [lease.token, lease.owner, attempt, data, at, max_bytes, output_slack(max_bytes),
             "1" if ended else "0"],
            subject=lease.key,
        )

    async def output(self, key: str, offsets: Mapping[int, int] | None = None
                     ) -> list[RunOutput]:
        offsets = offsets or {}
        for _ in range(KEYS_CHANGED_RETRIES):
            # The runs first, to declare their strings; a run that starts in between
            # makes the script answer KEYS_CHANGED, and the read starts again.
            with translated_errors(self._ctx.where):
                tokens = sorted(int(token) for token in cast(
                    list[bytes], await self._ctx.client.hkeys(self._ctx.keys.output(key))))
            args: list[ScriptArg] = []
            for token in tokens:
                args += [token, offsets.get(token, 0)]
            try:
                answer = await self._ctx.run(
                    "output",
                    [self._ctx.keys.job(key), self._ctx.keys.output(key),
                     *(self._ctx.keys.output_run(key, token) for token in tokens)],
                    args, subject=key)
            except KeysChanged:
                continue
            return _runs(answer)
        raise StoreError(f"job {key!r}: its runs changed on each of {KEYS_CHANGED_RETRIES} "
                         "tries to read its output")


def _runs(answer: list[Any]) -> list[RunOutput]:
    state, current = answer[0].decode(), int(answer[1])
    runs = []
    for token_text, known, data, start in answer[2]:
        token = int(token_text)
        run = orjson.loads(known)
        runs.append(RunOutput(
            token=token, attempt=int(run["a"]), supervisor=run["s"], data=data,
            start=int(start), kept_from=max(int(run["f"]), int(run["n"]) - int(run["m"])),
            total=int(run["n"]),
            ended=bool(run["e"]) or state != "running" or current != token))
    return runs
