"""The Lua commands: read once from lua/, registered per client, status codes mapped.

Each command is `lua/<name>-<key count>.lua`, or `lua/<name>-<key count>+<k>n.lua` for
one that takes k more keys per item of a list (`renew-4+2n`: four, then two per lease;
`+n` is one per item); `lua/_lib.lua` is prepended to every one, and after it each
`lua/include/<name>.lua` that the script names on a line `-- include <name>`; ahead of
them all, one line defines the table POLICY of the numbers they apply (policy.py
lua_policy), so that no Lua literal restates a Python constant.  Line numbers in Redis
error messages count from that line.  Scripts answer `{status, ...}`;
`error_for` is the one place a status becomes an exception.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from importlib import resources
from typing import Any

from redis.commands.core import AsyncScript

from supervisor.errors import (
    JobExists,
    JobNotFound,
    PoolsupError,
    StaleTick,
    StaleToken,
    SupervisorIdTaken,
)
from supervisor.store.policy import lua_policy
from supervisor.store.redis.connection import RedisClient
from supervisor.store.redis.wait import run_and_wait

_LIBRARY = "_lib.lua"
_COMMAND_FILE = re.compile(r"(?P<name>[a-z][a-z-]*)-(?P<keys>\d+)(?:\+(?P<per>\d*)n)?\.lua")
_INCLUDE = re.compile(r"^-- include (?P<name>[a-z][a-z_]*)$", re.MULTILINE)

ScriptArg = str | bytes | int | float
ScriptKey = str | bytes  # a key, as a caller built it or encoded it once


class Status(IntEnum):
    OK = 0
    JOB_EXISTS = 1
    JOB_NOT_FOUND = 2
    STALE_TOKEN = 3
    SUPERVISOR_ID_TAKEN = 4
    KEYS_CHANGED = 5
    STALE_TICK = 6


class KeysChanged(Exception):
    """The keys the caller declared, read from the job just before, are no longer the
    job's: the script changed nothing; read them again and retry."""


# Tries before a job whose declared keys keep changing is an error.
KEYS_CHANGED_RETRIES = 10


def error_for(status: Status, subject: str) -> PoolsupError | KeysChanged:
    """The exception for a script's non-OK status; `subject` is the key or id it was about."""
    match status:
        case Status.JOB_EXISTS:
            return JobExists(f"job {subject!r} is already live (pending or running)")
        case Status.JOB_NOT_FOUND:
            return JobNotFound(f"no live or retained job has the key {subject!r}")
        case Status.STALE_TOKEN:
            return StaleToken(f"job {subject!r}: the lease is stale, another claim owns it")
        case Status.KEYS_CHANGED:
            return KeysChanged(subject)
        case Status.STALE_TICK:
            return StaleTick(f"the plan's tick is no longer current (a newer tick fired, or "
                             f"its outcome is recorded): {subject!r} left as it is")
        case Status.SUPERVISOR_ID_TAKEN:
            return SupervisorIdTaken(
                f"supervisor id {subject!r} is in use by another live instance of the pool"
            )
    raise ValueError(f"no error for status {status!r}")


@dataclass(frozen=True)
class Command:
    name: str
    key_count: int  # the fixed keys
    source: str  # with _lib.lua
    body: str  # without
    keys_per_item: int = 0  # then this many more per item (0: none)

    def check_key_count(self, count: int) -> None:
        per = self.keys_per_item
        if count == self.key_count or (
            per and count > self.key_count and (count - self.key_count) % per == 0
        ):
            return
        wanted = f"{self.key_count}" + (f" + {per} per item" if per else "")
        raise ValueError(f"{self.name} takes {wanted} keys, got {count}")


def policy_line() -> str:
    """`local POLICY = {...}`: the numbers of policy.py lua_policy, for every script."""
    fields = ", ".join(f"{name} = {value}" for name, value in lua_policy().items())
    return f"local POLICY = {{{fields}}}"


def included(name: str) -> str:
    """`lua/include/<name>.lua` with POLICY and _lib.lua before it, for a test that
    calls its functions."""
    folder = resources.files("supervisor.store.redis") / "lua"
    return "\n".join([policy_line(), (folder / _LIBRARY).read_text(encoding="utf-8"),
                      (folder / "include" / f"{name}.lua").read_text(encoding="utf-8")])


@functools.cache
def commands() -> dict[str, Command]:
    """Every command script, by name, with _lib.lua prepended."""
    folder = resources.files("supervisor.store.redis") / "lua"
    library = (folder / _LIBRARY).read_text(encoding="utf-8")
    found: dict[str, Command] = {}
    for entry in folder.iterdir():
        match = _COMMAND_FILE.fullmatch(entry.name)
        if match:
            body = entry.read_text(encoding="utf-8")
            per = 0 if match["per"] is None else int(match["per"] or 1)
            included = [(folder / "include" / f"{name}.lua").read_text(encoding="utf-8")
                        for name in _INCLUDE.findall(body)]
            found[match["name"]] = Command(match["name"], int(match["keys"]),
                                           "\n".join([policy_line(), library, *included, body]),
                                           body, per)
    return found


class Scripts:
    """The commands registered on one client (EVALSHA, loaded again after NOSCRIPT)."""

    def __init__(self, client: RedisClient) -> None:
        self._client = client
        self._registered: dict[str, tuple[Command, AsyncScript]] = {
            name: (command, client.register_script(command.source))
            for name, command in commands().items()
        }

    async def run(
        self, name: str, keys: Sequence[ScriptKey], args: Sequence[ScriptArg], *, subject: str
    ) -> list[Any]:
        """Run a command; raise the typed error for a non-OK status, else return the rest
        of its answer."""
        command, script = self._registered[name]
        command.check_key_count(len(keys))
        answer = await script(keys=list(keys), args=list(args))
        return checked(answer, subject)

    async def run_replicated(
        self, name: str, keys: Sequence[ScriptKey], args: Sequence[ScriptArg], *, subject: str,
        replicas: int,
    ) -> tuple[list[Any], int]:
        """`run`, then WAIT for `replicas` on the same connection: the script's whole
        answer, status first, unchecked (what a refusal means depends on whether the
        replicas have what it saw: see `checked`), and how many replicas acknowledged
        the script's writes."""
        command, script = self._registered[name]
        command.check_key_count(len(keys))
        answer, acks = await run_and_wait(self._client, script.sha, command.source, keys,
                                          args, replicas)
        return list(answer), acks


def checked(answer: list[Any], subject: str) -> list[Any]:
    """The rest of a script's answer; the typed error of a non-OK status."""
    status = Status(int(answer[0]))
    if status is not Status.OK:
        raise error_for(status, subject)
    return list(answer[1:])
