"""A running job's Python thread stacks, on request (`poolsup debug KEY`).

The supervisor asks through the fork server, which sends the job's process STACKS_SIGNAL
(a real-time signal, so that it is neither a signal handlers commonly use nor one whose
default action is to end the job before the reporter is in place: the fork server
only sends it once the job reported its start).  Python runs the handler in the main
thread between two bytecodes: it takes each thread's frames there, and a short thread
sends them on the control channel (the handler cannot take the channel's lock: the
main thread may hold it).  A main thread blocked in C code never runs the handler; the
supervisor then answers that it got no stacks, which is the diagnosis."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import traceback
from types import FrameType
from typing import Any

from sandbox import protocol, raw_signal
from sandbox.channel import ControlChannel

STACKS_SIGNAL = signal.SIGRTMIN + 3


def thread_stacks(main_frame: FrameType | None) -> list[dict[str, Any]]:
    """Each thread's stack, innermost frame last; the main thread's from `main_frame`
    (where the signal came), not from the handler that reads it."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    main_id = threading.main_thread().ident
    frames = dict(sys._current_frames())
    if main_frame is not None and main_id is not None:
        frames[main_id] = main_frame
    stacks = []
    for ident, frame in sorted(frames.items(), key=lambda item: item[0] != main_id):
        stacks.append({
            "thread": names.get(ident, f"thread {ident}"),
            "main": ident == main_id,
            "frames": frame_entries(traceback.extract_stack(frame)),
        })
    return stacks


def frame_entries(summary: list[traceback.FrameSummary]) -> list[dict[str, Any]]:
    """A stack's frames as `debug` shows them, innermost last."""
    return [{"file": entry.filename, "line": entry.lineno, "function": entry.name,
             "code": entry.line or ""} for entry in summary]


def install_stack_reporter(channel: ControlChannel) -> None:
    def report(_signum: int, frame: FrameType | None) -> None:
        stacks = thread_stacks(frame)
        threading.Thread(target=_send, args=(channel, stacks), name="poolsup-stacks",
                         daemon=True).start()

    raw_signal.set_handler(STACKS_SIGNAL, report)


def _send(channel: ControlChannel, stacks: list[dict[str, Any]]) -> None:
    with contextlib.suppress(OSError):  # the supervisor is gone: nobody asks any more
        channel.send(protocol.ThreadStacks(threads=stacks))
