"""The Linux process controls the sandbox needs: prctl(2), mlockall(2), /proc and the C
environment."""

from __future__ import annotations

import ctypes
import os
import resource
import signal

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_MCL_CURRENT, _MCL_FUTURE = 1, 2
_CAP_IPC_LOCK = 14
# In /proc/PID/stat, counted from the field after the command name (field 3).
_ENV_START, _ENV_END = 47, 48

_libc = ctypes.CDLL(None, use_errno=True)
# Typed once: every child calls it, and converting untyped arguments touches enough of
# ctypes to cost a forked child dozens of copy-on-write page faults.
_libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
_libc.prctl.restype = ctypes.c_int


def _prctl(option: int, value: int) -> None:
    if _libc.prctl(option, value, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl({option}): {os.strerror(errno)}")


def set_parent_death_signal(signum: signal.Signals) -> None:
    """Have the kernel send `signum` to this process when its parent dies."""
    _prctl(_PR_SET_PDEATHSIG, int(signum))


def become_child_subreaper() -> None:
    """Adopt orphaned descendants, instead of letting them go to init."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def lock_memory() -> None:
    """Keep this process's pages in RAM (mlockall), so that swapping never stalls it.

    Future mappings too (MCL_FUTURE) only where locking is unbounded (CAP_IPC_LOCK, or
    no RLIMIT_MEMLOCK): under a finite limit, growing past it would make allocations
    fail. Locks are not inherited across fork, MCL_FUTURE included.
    """
    flags = _MCL_CURRENT
    if _has_capability(_CAP_IPC_LOCK) or resource.getrlimit(resource.RLIMIT_MEMLOCK)[0] == (
        resource.RLIM_INFINITY
    ):
        flags |= _MCL_FUTURE
    if _libc.mlockall(flags) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mlockall: {os.strerror(errno)}")


def locked_bytes(pid: int | str = "self") -> int:
    """How much of a process's memory is locked (VmLck in /proc/PID/status)."""
    with open(f"/proc/{pid}/status", "rb") as file:
        for line in file:
            if line.startswith(b"VmLck:"):
                return int(line.split()[1]) * 1024
    return 0


def _has_capability(number: int) -> bool:
    with open("/proc/self/status", "rb") as file:
        for line in file:
            if line.startswith(b"CapEff:"):
                return bool(int(line.split()[1], 16) >> number & 1)
    return False


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


def hide_startup_environment() -> None:
    """Keep the environment, but out of /proc/PID/environ: every variable copied to the
    heap (setenv), then the block the process was started with zeroed. For a process
    whose environment may hold secrets (POOLSUP_STORE's password) and that other
    processes of its user can read /proc of."""
    for name, value in os.environ.items():
        os.putenv(name, value)
    wipe_startup_environment()
