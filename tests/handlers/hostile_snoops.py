"""Looks for the supervisor's secrets everywhere a process's environment shows, and
reports who and where it runs as."""

import ctypes
import os
import posix
import resource

from hostile_pids import record


def _read(path):
    try:
        with open(path, "rb") as file:
            return file.read().decode(errors="replace")
    except OSError as error:
        return f"unreadable: {error}"


def run(job):
    if isinstance(job.payload, dict) and "pids" in job.payload:
        record(job)
    return {
        "environ": dict(os.environ),
        "posix_environ": {k.decode(): v.decode() for k, v in posix.environ.items()},
        "proc_environ": _read("/proc/self/environ"),
        "fork_server_environ": _read(f"/proc/{os.getppid()}/environ"),
        "cmdline": _read("/proc/self/cmdline"),
    }


def _parent_death_signal():
    signum = ctypes.c_int(0)
    ctypes.CDLL(None).prctl(2, ctypes.byref(signum), 0, 0, 0)  # PR_GET_PDEATHSIG
    return signum.value


def identity(job):
    return {
        "uid": os.getuid(),
        "gid": os.getgid(),
        "groups": sorted(os.getgroups()),
        "home": os.environ.get("HOME"),
        "user": os.environ.get("USER"),
        "cwd": os.getcwd(),
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "core": list(resource.getrlimit(resource.RLIMIT_CORE)),
        "nofile": list(resource.getrlimit(resource.RLIMIT_NOFILE)),
        "cpu": list(resource.getrlimit(resource.RLIMIT_CPU)),
        "parent_death_signal": _parent_death_signal(),
    }
