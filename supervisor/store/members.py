"""Membership entries as both stores keep them: SupervisorInfo as JSON."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from supervisor.store.base import SupervisorInfo

_FIELDS = frozenset(field.name for field in dataclasses.fields(SupervisorInfo))
_TUPLES = ("handlers", "rebalance")


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
