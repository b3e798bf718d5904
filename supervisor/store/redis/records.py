"""Job hashes as Redis stores them, decoded into JobRecord.

Times are stored as store milliseconds (with a microsecond fraction); a field that is
absent means None.  Payload, result and checkpoint are JSON text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import orjson

from supervisor.store.records import JobEvent, JobRecord, JobState, JobStats


def seconds(ms: bytes | str) -> float:
    return float(ms) / 1000.0


def milliseconds(seconds: float) -> float:
    return seconds * 1000.0


def pairs(flat: Sequence[Any]) -> zip[tuple[Any, Any]]:
    """[a1, b1, a2, b2, ...] (a script's answer, HGETALL's in Lua) -> (a1, b1), (a2, b2), ..."""
    return zip(flat[0::2], flat[1::2], strict=True)


def decode_job(raw: Mapping[bytes, bytes], *, history: bool = True) -> JobRecord:
    """A JobRecord from an HGETALL answer (which must not be empty), with its events
    unless not `history`."""
    fields = {name.decode(): value for name, value in raw.items()}

    def text(name: str) -> str | None:
        value = fields.get(name)
        return None if value is None else value.decode()

    def time(name: str) -> float | None:
        value = fields.get(name)
        return None if value is None else seconds(value)

    def json(name: str) -> Any:
        value = fields.get(name)
        return None if value is None else orjson.loads(value)

    def number(name: str) -> int:
        return int(fields.get(name, b"0"))

    pid, rss, cpu = fields.get("pid"), fields.get("rss_bytes"), fields.get("cpu_percent")
    return JobRecord(
        key=fields["key"].decode(),
        handler=fields["handler"].decode(),
        state=cast(JobState, fields["state"].decode()),
        attempts=number("attempts"),
        max_attempts=number("max_attempts"),
        token=number("token"),
        supervisor=text("owner"),
        payload=json("payload"),
        result=json("result"),
        error=text("error"),
        created_at=seconds(fields["created_at"]),
        started_at=time("started_at"),
        finished_at=time("finished_at"),
        lease_deadline=time("lease_deadline"),
        lease_losses=number("lease_losses"),
        snoozes=number("snoozes"),
        stop_requested=fields.get("stop_requested") == b"1",
        stats=JobStats(
            pid=None if pid is None else int(pid),
            rss_bytes=None if rss is None else int(rss),
            cpu_percent=None if cpu is None else float(cpu),
        ),
        checkpoint=json("checkpoint"),
        checkpoint_at=time("checkpoint_at"),
        reserved_for=text("reserved_for"),
        reserved_until=time("reserved_until"),
        moved_from=text("moved_from"),
        run_at=time("run_at"),
        schedule=text("schedule"),
        priority=number("priority"),
        group=text("group"),
        traceparent=text("traceparent"),
        events=decode_events(fields.get("events")) if history else (),
    )


def decode_events(text: bytes | None) -> tuple[JobEvent, ...]:
    """The history kept in the field `events` (lua/_lib.lua note_event)."""
    if not text:
        return ()
    return tuple(
        JobEvent(at=seconds(entry["at"]), event=entry["e"], supervisor=entry.get("s"),
                 token=entry.get("t"), detail=entry.get("d"))
        for entry in map(orjson.loads, text.split(b"\n")))
