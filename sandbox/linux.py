"""The Linux process controls the sandbox needs: prctl(2), /proc and the C environment."""

from __future__ import annotations

import ctypes
import os
import signal

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
# In /proc/PID/stat, counted from the field after the command name (field 3).
_ENV_START, _ENV_END = 47, 48

_libc = ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, value: int) -> None:
    unused = ctypes.c_ulong(0)
    if _libc.prctl(option, ctypes.c_ulong(value), unused, unused, unused) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl({option}): {os.strerror(errno)}")


def set_parent_death_signal(signum: signal.Signals) -> None:
    """Have the kernel send `signum` to this process when its parent dies."""
    _prctl(_PR_SET_PDEATHSIG, int(signum))


def become_child_subreaper() -> None:
    """Adopt orphaned descendants, instead of letting them go to init."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def child_pids() -> list[int]:
    """The pids of this process's children, from /proc (one `children` file per thread)."""
    pids: list[int] = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children", "rb") as file:
                pids.extend(int(pid) for pid in file.read().split())
        except FileNotFoundError:
            pass  # a thread that just ended
    return pids


def clear_c_environment() -> None:
    """Empty the C library's environment (what `exec` and C extensions see)."""
    if _libc.clearenv() != 0:
        raise OSError(ctypes.get_errno(), "clearenv failed")


def wipe_startup_environment() -> None:
    """Zero the environment the process was started with, on its stack.

    That block is what /proc/PID/environ shows, whatever the process did to its
    environment since; a forked child has a copy of its parent's.
    """
    with open("/proc/self/stat", "rb") as file:
        stat = file.read()
    fields = stat[stat.rindex(b")") + 2 :].split()
    start, end = int(fields[_ENV_START]), int(fields[_ENV_END])  # fields 50 and 51
    if 0 < start < end:
        ctypes.memset(start, 0, end - start)
