"""Messages between the supervisor and its sandbox processes, defined once: a frozen
dataclass per message, which both sides build and read (`encode`, `encode_line`, and
`decode_request`, `decode_event`, `decode_message`), so that both type-check; the JSON
on the wire is as written below.

Two channels:

* The fork server channel: one SOCK_SEQPACKET socket pair between the supervisor and
  the fork server (`python -m sandbox.forkserver`).  A packet holds one request or
  several, a line each (`encode_requests`: the supervisor sends the `finished` notices
  of a loop iteration with its next request), and one event; orjson objects, small
  (never a payload).  `spawn` carries two file descriptors by SCM_RIGHTS: the child's
  control socket and its output socket, which a child of a handler with
  max_jobs_per_child > 1 keeps for its life.

  The handler table is given once, at start, in a file passed by descriptor
  (`--handlers-fd`; argv is readable by every user of the host):
    {NAME: {"path": ABS_PATH, "function": NAME, "memory_limit": BYTES|null,
            "cpu_limit": SECONDS|null, "nice": N|null, "cwd": ABS_PATH|null,
            "env": {NAME: VALUE}, "inherit_env": BOOL, "user": NAME|null,
            "group": NAME|null}}
  Every key but "path" may be left out; also "max_jobs_per_child": N (default 1).

  supervisor -> fork server
    {"op": "spawn", "job": JOB_ID, "handler": NAME, "deadline": BOOT|null}
                                                              + fds [control, output]
                                                              (the first fence; null: none)
    {"op": "assign", "job": JOB_ID, "pid": PID, "deadline": BOOT}
                                                              the reused child PID, which
                                                              waits for its next job, runs
                                                              JOB_ID from now, fenced at BOOT
    {"op": "finished", "jobs": [JOB_ID, ...]}                 their reused children said
                                                              "done": each waits, clean, for
                                                              its next job (or its end)
    {"op": "fence", "jobs": [JOB_ID, ...], "deadline": BOOT}  kill once fence_clock() >= BOOT
  A "deadline" is in seconds of CLOCK_BOOTTIME (`fence_clock()`), on both sides.
    {"op": "signal", "job": JOB_ID, "signal": N}              to the job's process group
    {"op": "kill", "job": JOB_ID}                             SIGKILL the whole job
    {"op": "exit"}                                            kill every job, then exit
    {"op": "ping", "seq": N}                                  answered with "pong" at once
  fork server -> supervisor
    {"ev": "ready", "pid": PID, "handlers": {NAME: ERROR_OR_NULL}, "sandbox": {NAME: TEXT}}
    {"ev": "spawned", "job": JOB_ID, "pid": PID}
    {"ev": "spawn_failed", "job": JOB_ID, "error": TEXT}      also for an "assign" whose
                                                              child is no longer waiting
    {"ev": "pong", "seq": N}                                  its loop is turning
    {"ev": "exited", "job": JOB_ID, "pid": PID, "code": N|null, "signal": N|null,
     "fenced": BOOL, "reason": TEXT|null, "survivors": [PID, ...]|null,
     "killed_for": TEXT|null}
      Sent once the job's child is reaped and every process a job left behind is
      gone; "survivors" names those still alive after 5 s of SIGKILL, if any.
      Not sent for a job whose reused child said "done" (the supervisor read that on
      the child's channel), unless the fork server ended the job first (a fence, a
      limit): then this is the job's end, and the child's death.
      "reason" is not null only when the fork server itself ended the job for a limit
      of its handler: "memory limit 100 MiB exceeded (peak 131 MiB)" or
      "cpu limit 2 s exceeded" (also when the kernel's RLIMIT_CPU ended it).
    In "ready", a handler's error is its import traceback, or why its jobs cannot
    run (an unknown user or group, a user switch without root).

  JOB_ID is a string chosen by the supervisor, unique per spawn or assign.

  fork server -> child: a SOCK_SEQPACKET pair per child. The fork server hands over a
  child's first job as one packet: the handler's name, the scratch directory and the
  job's id, with the control and output sockets attached, then closes its end; except
  for a shared child (an async handler with child_concurrency > 1, `sandbox.shared`):
  its pair stays open, the fork server hands it each further job the same way, and the
  child reports there each job's end, and the job that took it over its memory limit:
    {"rep": "ended", "job": JOB_ID, "code": N}  the job's task is over; N as a child's
                                                exit code (0, 1, 143 after a stop)
    {"rep": "over", "job": JOB_ID}              this job's step took the child's memory
                                                over its handler's limit
  A spawn of such a handler joins a shared child of it with room ("spawned" names the
  child's pid), else the child forked for it; every job of a shared child is fenced
  on its own, and a fence passed, a limit or a "kill" of one kills the whole child: each
  other job of it then exits with "killed_for" saying whose end it shares (such a job
  is released, its attempt not spent). A "signal" to a job of a shared child is not
  sent: its stop is on its control channel, where the child cancels its task.

* The job control channel: one SOCK_STREAM socket pair per child between the supervisor
  and the job's child; a child of a handler with max_jobs_per_child > 1 runs its jobs
  one after another on it.  Newline-delimited orjson objects (orjson never emits a raw
  newline).

  supervisor -> child
    {"t": "start", "key": K, "payload": ANY, "token": N, "attempt": N,
     "checkpoint": ANY|null, "trace": {"traceparent": TEXT, "tracestate": TEXT}|null}
                                                    first, once ("trace" if the supervisor
                                                    traces the attempt: sandbox/tracing.py)
    A reused child takes nothing before its next "start": what it finds ahead of that
    was meant for its last job, and is dropped.
    {"t": "stop", "reason": R}                      a graceful stop was asked for; R is
                                                    "stop", "drain", "rebalance", "timeout"
    {"t": "notify", "payload": ANY, "seq": N}       "seq" optional
    {"t": "stacks"}                                 a job of a shared child: answer with
                                                    its task's stack (`poolsup debug`)
  child -> supervisor
    {"t": "ack", "seq": N}                          the handler took note N
    {"t": "checkpoint", "value": ANY}               keep for the next attempt of the key
    {"t": "result", "stopping": BOOL, "value": ANY} the handler returned; "stopping":
                                                    after a stop had reached it
    {"t": "error", "error": TEXT, "traceback": TEXT, "final": BOOL}
    {"t": "snooze", "seconds": S}                   the handler raised sandbox.Snooze(S):
                                                    run again S seconds from now, the
                                                    attempt not spent (`snooze_seconds`)
    {"t": "end_schedule"}                           a schedule's producer raised
                                                    sandbox.EndSchedule
    {"t": "done"}                                   a reused child: its job is over and
                                                    it is clean (`sandbox.reuse`); it
                                                    waits for its next "start", its
                                                    last job's output all written
    {"t": "retired", "reason": TEXT}                a reused child whose job went well
                                                    exits instead, for this reason
    {"t": "spans", "spans": [SPAN, ...], "dropped": N}
                                                    a traced job's finished spans, before
                                                    its result (sandbox/otel_child.py)
  A note is acknowledged when `job.next_notification()` hands it to the handler, before
  anything the handler sends after; one never taken is never acknowledged (so the
  supervisor delivers it again to the next run).  A note without "seq" gets no ack.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from typing import Any

import orjson

MAX_PACKET = 256 * 1024

OP_SPAWN = "spawn"
OP_ASSIGN = "assign"
OP_FINISHED = "finished"
OP_FENCE = "fence"
OP_SIGNAL = "signal"
OP_KILL = "kill"
OP_EXIT = "exit"
OP_PING = "ping"
OP_STACKS = "stacks"  # send the job's process alone sandbox.stacks.STACKS_SIGNAL

EV_READY = "ready"
EV_SPAWNED = "spawned"
EV_SPAWN_FAILED = "spawn_failed"
EV_EXITED = "exited"
EV_PONG = "pong"

MSG_START = "start"
MSG_STOP = "stop"
MSG_NOTIFY = "notify"
MSG_ACK = "ack"
MSG_CHECKPOINT = "checkpoint"
MSG_RESULT = "result"
MSG_ERROR = "error"
MSG_SPANS = "spans"  # a traced job's finished spans (sandbox/otel_child.py)
MSG_STACKS = "stacks"  # the job's thread stacks, asked for with sandbox.stacks.STACKS_SIGNAL
MSG_SNOOZE = "snooze"
MSG_END_SCHEDULE = "end_schedule"
MSG_DONE = "done"
MSG_RETIRED = "retired"  # a reused child exits after this job, for a reason of its own


# -- the fork server channel: supervisor -> fork server ("op")


# How long a stop's reason may take to go ahead of its SIGTERM: the supervisor waits this
# long to write it (unless a note holds the socket), and a job whose SIGTERM came first
# waits this long, once, for the reason.
STOP_REASON_WAIT = 0.2

@dataclass(frozen=True, kw_only=True, slots=True)
class Spawn:
    op: str = OP_SPAWN
    job: str
    handler: str
    deadline: float | None = None  # the first fence; None: unfenced (a test's spawn)


@dataclass(frozen=True, kw_only=True, slots=True)
class Assign:
    op: str = OP_ASSIGN
    job: str
    pid: int  # a reused child that said "done" and waits for its next job
    deadline: float


@dataclass(frozen=True, kw_only=True, slots=True)
class Finished:
    op: str = OP_FINISHED
    jobs: list[str]


@dataclass(frozen=True, kw_only=True, slots=True)
class Fence:
    op: str = OP_FENCE
    jobs: list[str]
    deadline: float


@dataclass(frozen=True, kw_only=True, slots=True)
class Signal:
    op: str = OP_SIGNAL
    job: str
    signal: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Kill:
    op: str = OP_KILL
    job: str


@dataclass(frozen=True, kw_only=True, slots=True)
class AskStacks:
    op: str = OP_STACKS
    job: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Exit:
    op: str = OP_EXIT


@dataclass(frozen=True, kw_only=True, slots=True)
class Ping:
    op: str = OP_PING
    seq: int


Request = Spawn | Assign | Finished | Fence | Signal | Kill | AskStacks | Exit | Ping

# -- fork server -> supervisor ("ev")


@dataclass(frozen=True, kw_only=True, slots=True)
class Ready:
    ev: str = EV_READY
    pid: int
    handlers: dict[str, str | None]
    sandbox: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class Spawned:
    ev: str = EV_SPAWNED
    job: str
    pid: int


@dataclass(frozen=True, kw_only=True, slots=True)
class SpawnFailed:
    ev: str = EV_SPAWN_FAILED
    job: str
    error: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Pong:
    ev: str = EV_PONG
    seq: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Exited:
    ev: str = EV_EXITED
    job: str
    pid: int
    code: int | None
    signal: int | None
    fenced: bool
    reason: str | None = None
    survivors: list[int] | None = None
    # A job of a shared child killed with it on another job's account: whose, and why.
    killed_for: str | None = None


Event = Ready | Spawned | SpawnFailed | Pong | Exited

# -- the job control channel ("t")


@dataclass(frozen=True, kw_only=True, slots=True)
class Start:
    t: str = MSG_START
    key: str
    payload: Any  # the supervisor sends it as JSON it does not decode (orjson.Fragment)
    token: int
    attempt: int
    checkpoint: Any = None
    trace: dict[str, str] | None = None  # the attempt's span, if traced (sandbox/tracing.py)


@dataclass(frozen=True, kw_only=True, slots=True)
class Stop:
    t: str = MSG_STOP
    reason: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Notify:
    t: str = MSG_NOTIFY
    payload: Any
    seq: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Ack:
    t: str = MSG_ACK
    seq: int | None = None  # (a child's message: every field has a default, as the
    # supervisor read them before they were typed; one it cannot use is ignored)


@dataclass(frozen=True, kw_only=True, slots=True)
class Checkpoint:
    t: str = MSG_CHECKPOINT
    value: Any = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Result:
    t: str = MSG_RESULT
    stopping: bool = False
    value: Any = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Error:
    t: str = MSG_ERROR
    error: str = ""
    traceback: str | None = ""
    final: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class Snooze:
    t: str = MSG_SNOOZE
    seconds: Any = None  # checked by `snooze_seconds` on both sides


@dataclass(frozen=True, kw_only=True, slots=True)
class EndSchedule:
    t: str = MSG_END_SCHEDULE


@dataclass(frozen=True, kw_only=True, slots=True)
class Spans:
    t: str = MSG_SPANS
    spans: Any = None  # a list of spans, as sandbox/otel_child.py writes them (unchecked)
    dropped: Any = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class ThreadStacks:
    t: str = MSG_STACKS
    threads: list[dict[str, Any]] | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Done:
    t: str = MSG_DONE


@dataclass(frozen=True, kw_only=True, slots=True)
class Retired:
    t: str = MSG_RETIRED
    reason: Any = ""  # why it cannot be made clean for the next job (unchecked)


Message = (Start | Stop | Notify | Ack | Checkpoint | Result | Error | Snooze | EndSchedule
           | Spans | ThreadStacks | Done | Retired)



class UnknownMessage(ValueError):
    """A message of a kind this side does not know (sent by a newer poolsup: a
    supervisor still running the code it started with meets a fork server or a child
    of the code installed since, after a reload).  Its reader skips it."""


def _by_tag(tag: str, *kinds: type) -> dict[str, tuple[type, frozenset[str]]]:
    """Each kind of message, and the names of its other fields, by its tag's value (the
    default of its `tag` field)."""
    return {str(next(f.default for f in fields(kind) if f.name == tag)):
            (kind, frozenset(f.name for f in fields(kind) if f.name != tag))
            for kind in kinds}


_REQUESTS = _by_tag("op", Spawn, Assign, Finished, Fence, Signal, Kill, AskStacks, Exit, Ping)
_EVENTS = _by_tag("ev", Ready, Spawned, SpawnFailed, Pong, Exited)
_MESSAGES = _by_tag("t", Start, Stop, Notify, Ack, Checkpoint, Result, Error, Snooze,
                    EndSchedule, Spans, ThreadStacks, Done, Retired)

def assignment(handler: str, scratch: str, job_id: str = "", slot: int = -1) -> bytes:
    """What the fork server hands a child with a job's sockets: the handler's name, the
    job's scratch directory, its id, and a shared child's slot in `sandbox.step_marks`."""
    return f"{handler}\0{scratch}\0{job_id}\0{slot}".encode()


def read_assignment(data: bytes) -> tuple[str, str, str, int]:
    handler, scratch, job_id, slot = [*data.decode().split("\0"), "", "", ""][:4]
    return handler, scratch, job_id, int(slot or -1)


# -- a shared child's reports to the fork server ("rep")

REP_ENDED = "ended"
REP_OVER = "over"


@dataclass(frozen=True, kw_only=True, slots=True)
class JobEnded:
    rep: str = REP_ENDED
    job: str
    code: int


@dataclass(frozen=True, kw_only=True, slots=True)
class OverLimit:
    rep: str = REP_OVER
    job: str


Report = JobEnded | OverLimit
_REPORTS = _by_tag("rep", JobEnded, OverLimit)


def decode_report(data: bytes) -> Report:
    """What a shared child tells the fork server; raises ValueError if it is none."""
    report: Report = _typed(data, "rep", _REPORTS)
    return report


# The result line, as the child writes it and the supervisor reads it: the returned
# value's JSON goes in as `orjson.dumps` made it, and comes out as it came, without
# decoding and encoding it again; by whether the handler returned after a stop had
# reached it.  A checkpoint's value goes in the same way.
_RESULT_HEADS = {
    True: b'{"t":"result","stopping":true,"value":',
    False: b'{"t":"result","stopping":false,"value":',
}
_CHECKPOINT_HEAD = b'{"t":"checkpoint","value":'


def result_line(value_json: bytes, *, stopping: bool) -> bytes:
    """A `Result` with `value_json` as its value, as a line."""
    return _RESULT_HEADS[stopping] + value_json + b"}\n"


def read_result_line(line: bytes) -> tuple[bytes, bool] | None:
    """The value's JSON and "stopping" of a line written by `result_line` (without its
    newline), or None if it is not one (another message, or a result written another
    way, which `decode_message` reads)."""
    for stopping, head in _RESULT_HEADS.items():
        if line.startswith(head) and line.endswith(b"}"):
            return line[len(head):-1], stopping
    return None


def checkpoint_line(value_json: bytes) -> bytes:
    """A `Checkpoint` with `value_json` as its value, as a line."""
    return _CHECKPOINT_HEAD + value_json + b"}\n"


# The longest snooze: a year.  A longer one is more likely a unit mistake (milliseconds)
# than a wish, and a job pending for years would look lost.
MAX_SNOOZE = 366 * 86400.0


def snooze_seconds(value: object) -> float:
    """A snooze's delay, checked on both sides of the socket: a number of seconds from 0
    to MAX_SNOOZE.  Raises ValueError with one line that says what is wrong."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"sandbox.Snooze takes a number of seconds, not {value!r:.60}")
    if not 0 <= value <= MAX_SNOOZE:  # NaN fails this too
        raise ValueError(f"sandbox.Snooze takes 0 to {MAX_SNOOZE:.0f} seconds (a year), "
                         f"not {value!r:.60}")
    return float(value)


def fence_clock() -> float:
    """The clock of every fence deadline, on both sides of the socket: CLOCK_BOOTTIME,
    which neither steps with the wall clock nor stops while the host is suspended (a
    lease in the store runs on through a suspend, so the fence must too)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def encode(message: Request | Event | Message | Report) -> bytes:
    return orjson.dumps(message)


def encode_requests(messages: list[Request]) -> bytes:
    """One packet of the fork server channel holding `messages`, a line each."""
    return b"\n".join(orjson.dumps(message) for message in messages)


def encode_line(message: Message) -> bytes:
    return orjson.dumps(message) + b"\n"


def decode(data: bytes) -> dict[str, Any]:
    """A JSON object, any; raises ValueError if it is not one."""
    value = orjson.loads(data)
    if not isinstance(value, dict):
        raise ValueError(f"protocol message is not an object: {data[:80]!r}")
    return value


def decode_request(data: bytes) -> Request:
    """What the supervisor asks the fork server; raises ValueError if it is none."""
    message: Request = _typed(data, "op", _REQUESTS)  # not typing.cast: a call less
    return message


def decode_requests(data: bytes) -> list[Request]:
    """The requests of one packet (`encode_requests`); raises ValueError if a line holds
    none."""
    return [decode_request(line) for line in data.split(b"\n")]


def decode_event(data: bytes) -> Event:
    """What the fork server tells the supervisor; raises ValueError if it is none."""
    message: Event = _typed(data, "ev", _EVENTS)  # not typing.cast: a call less
    return message


def decode_message(data: bytes) -> Message:
    """A message of a job's control channel (either way); raises ValueError if it is
    none."""
    message: Message = _typed(data, "t", _MESSAGES)  # not typing.cast: a call less
    return message


def _typed(data: bytes, tag: str, kinds: dict[str, tuple[type, frozenset[str]]]) -> Any:
    """The message `data` holds.  A field this side does not know is left out (a newer
    sender's); a field it needs and does not get is a ValueError, and so is a kind it
    does not know (`UnknownMessage`)."""
    values = decode(data)
    found = kinds.get(values.pop(tag, None))
    if found is None:
        raise UnknownMessage(f"unknown message: {data[:80]!r}")
    kind, names = found
    if not names.issuperset(values):
        values = {name: value for name, value in values.items() if name in names}
    try:
        return kind(**values)
    except TypeError as error:  # a field missing
        raise ValueError(f"bad {kind.__name__} message ({error}): {data[:80]!r}") from None
