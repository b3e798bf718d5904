"""Messages between the supervisor and its sandbox processes, defined once.

Two channels:

* The fork server channel: one SOCK_SEQPACKET socket pair between the supervisor and
  the fork server (`python -m sandbox.forkserver`).  One message per packet, orjson
  objects, small (never a payload).  `spawn` carries two file descriptors by
  SCM_RIGHTS: the child's control socket and its output socket.

  The handler table is given once, at start, in a file passed by descriptor
  (`--handlers-fd`; argv is readable by every user of the host):
    {NAME: {"path": ABS_PATH, "function": NAME, "memory_limit": BYTES|null,
            "cpu_limit": SECONDS|null, "nice": N|null, "cwd": ABS_PATH|null,
            "env": {NAME: VALUE}, "inherit_env": BOOL, "user": NAME|null,
            "group": NAME|null}}
  Every key but "path" may be left out; also "max_jobs_per_child": N (default 1).

  supervisor -> fork server
    {"op": "spawn", "job": JOB_ID, "handler": NAME, "deadline": BOOT}
                                                              + fds [control, output]
                                                              (the first fence; optional)
    {"op": "fence", "jobs": [JOB_ID, ...], "deadline": BOOT}  kill once fence_clock() >= BOOT
  A "deadline" is in seconds of CLOCK_BOOTTIME (`fence_clock()`), on both sides.
    {"op": "signal", "job": JOB_ID, "signal": N}              to the job's process group
    {"op": "kill", "job": JOB_ID}                             SIGKILL the whole job
    {"op": "exit"}                                            kill every job, then exit
    {"op": "ping", "seq": N}                                  answered with "pong" at once
  fork server -> supervisor
    {"ev": "ready", "pid": PID, "handlers": {NAME: ERROR_OR_NULL}}
    {"ev": "spawned", "job": JOB_ID, "pid": PID}
    {"ev": "spawn_failed", "job": JOB_ID, "error": TEXT}
    {"ev": "pong", "seq": N}                                  its loop is turning
    {"ev": "exited", "job": JOB_ID, "pid": PID, "code": N|null, "signal": N|null,
     "fenced": BOOL, "reason": TEXT, "survivors": [PID, ...]}
      Sent once the job's child is reaped and every process a job left behind is
      gone; "survivors" is there only when some were still alive after 5 s of SIGKILL.
      For a handler with max_jobs_per_child > 1, also when the child, alive, said
      "done" (below): "code" 0, "signal" null; the same pid may then run later jobs.
      "reason" is there only when the fork server itself ended the job for a limit
      of its handler: "memory limit 100 MiB exceeded (peak 131 MiB)" or
      "cpu limit 2 s exceeded" (also when the kernel's RLIMIT_CPU ended it).
    In "ready", a handler's error is its import traceback, or why its jobs cannot
    run (an unknown user or group, a user switch without root).

  JOB_ID is a string chosen by the supervisor, unique per spawn.

  fork server <-> child: a SOCK_SEQPACKET pair per child. The fork server hands over a
  job as one packet: the handler's name, with the job's control and output sockets
  attached. A child of a handler with max_jobs_per_child > 1 answers "done" once its
  job ended normally and it made itself clean (`sandbox.reuse`), then waits for its
  next job on the same socket; end of stream tells it to exit.

* The job control channel: one SOCK_STREAM socket pair per job between the supervisor
  and the job's child.  Newline-delimited orjson objects (orjson never emits a raw
  newline).

  supervisor -> child
    {"t": "start", "key": K, "payload": ANY, "token": N, "attempt": N}   first, once
      (with "checkpoint": ANY if one was saved, "trace": {"traceparent": TEXT,
      "tracestate": TEXT} if the supervisor traces the attempt: sandbox/tracing.py)
    {"t": "stop", "reason": R}                      a graceful stop was asked for; R is
                                                    "stop", "drain", "rebalance", "timeout"
    {"t": "notify", "payload": ANY, "seq": N}       "seq" optional
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
    {"t": "spans", "spans": [SPAN, ...], "dropped": N}
                                                    a traced job's finished spans, before
                                                    its result (sandbox/otel_child.py)
  A note is acknowledged when `job.next_notification()` hands it to the handler, before
  anything the handler sends after; one never taken is never acknowledged (so the
  supervisor delivers it again to the next run).  A note without "seq" gets no ack.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

MAX_PACKET = 256 * 1024

OP_SPAWN = "spawn"
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

# A child of a handler with max_jobs_per_child > 1, on its assignment socket to the fork
# server: its job is over and it is clean for the next (sandbox.reuse).
CHILD_DONE = b"done"


def assignment(handler: str, scratch: str) -> bytes:
    """What the fork server hands a child with a job's sockets: the handler's name and
    the job's scratch directory."""
    return f"{handler}\0{scratch}".encode()


def read_assignment(data: bytes) -> tuple[str, str]:
    handler, _, scratch = data.decode().partition("\0")
    return handler, scratch

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


def encode(message: dict[str, Any]) -> bytes:
    return orjson.dumps(message)


def encode_line(message: dict[str, Any]) -> bytes:
    return orjson.dumps(message) + b"\n"


def decode(data: bytes) -> dict[str, Any]:
    value = orjson.loads(data)
    if not isinstance(value, dict):
        raise ValueError(f"protocol message is not an object: {data[:80]!r}")
    return value
