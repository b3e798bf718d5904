"""Membership entries as every store keeps them (SupervisorInfo as JSON), decoded into
the `SupervisorStatus` values that `members` and `snapshot` return."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from supervisor.store.policy import LIVE_TTLS
from supervisor.store.records import SupervisorInfo, SupervisorStatus

_FIELDS = frozenset(field.name for field in dataclasses.fields(SupervisorInfo))
_TUPLES = ("handlers", "rebalance", "sandbox_notes", "shared")


def encode_info(info: SupervisorInfo) -> bytes:
    return orjson.dumps(dataclasses.asdict(info))


def decode_info(info_json: bytes | str) -> SupervisorInfo:
    """The entry's SupervisorInfo.  Fields an older version did not write take their
    defaults, fields a newer one added are left out, and JSON lists become tuples."""
    fields: dict[str, Any] = {name: value for name, value in orjson.loads(info_json).items()
                              if name in _FIELDS}
    for name in _TUPLES:
        if name in fields:
            fields[name] = tuple(fields[name])
    return SupervisorInfo(**fields)


def live_members(
    entries: Iterable[tuple[bytes | str, float]],
    running: Mapping[str, Mapping[str, int]],
    inbound: Mapping[str, int],
) -> tuple[SupervisorStatus, ...]:
    """The statuses of the entries seen within LIVE_TTLS of their lease ttls, by id.

    `entries`: (info JSON, seconds since the store last heard from it); `running`: per
    owner, its running jobs per handler; `inbound`: per supervisor, the pending jobs
    whose live reservation names it."""
    members = []
    for info_json, silent_for in entries:
        info = decode_info(info_json)
        if silent_for > LIVE_TTLS * info.lease_ttl:
            continue
        by_handler = dict(sorted(running.get(info.id, {}).items()))
        members.append(SupervisorStatus(
            info=info,
            last_seen=max(0.0, silent_for),
            running=sum(by_handler.values()),
            running_by_handler=by_handler,
            inbound=inbound.get(info.id, 0),
        ))
    return tuple(sorted(members, key=lambda member: member.info.id))
