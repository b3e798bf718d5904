"""Carrying out a sandbox `Plan` in a job's child (`Enforcement`), and finding out what
this kernel can enforce (`probe`, in the fork server and in `poolsup check`).

`hide` runs first, while the child still has the privileges it started with (a root
supervisor's job switches user after it); `confine` last, just before the handler:
no_new_privs, the Landlock domain, the syscall filter. Neither can be lifted: a reused
child is confined once, for its handler.
"""

from __future__ import annotations

import contextlib
import ctypes
import os

from sandbox import landlock, landlock_hiding, seccomp
from sandbox.hiding import Hider
from sandbox.policy import KernelSupport, Plan

_PR_SET_NO_NEW_PRIVS, _PR_GET_SECCOMP = 38, 21
_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                        ctypes.c_ulong]


class Enforcement:
    """A `Plan` made ready in the fork server, once per handler: the Landlock ruleset
    built (its fd is kept open for the children), the filter compiled, the decoys'
    mounts and the capabilities to keep worked out; so that a job's child only makes
    the few system calls that confine it."""

    def __init__(self, plan: Plan, decoys: tuple[str, str]) -> None:
        self.plan = plan
        self._hider = Hider(plan.hidden, decoys) if plan.hidden else None
        self.ruleset_fd: int | None = None
        rules = plan.landlock
        if rules is not None:
            ruleset = landlock.Ruleset(fs=rules.fs, net=rules.net, scoped=rules.scoped)
            for path, access in rules.paths:
                ruleset.allow_path(path, access)
            for path, access in landlock_hiding.rules_around(rules.hidden, rules.others):
                ruleset.allow_path(path, access)
            for port in rules.ports:
                ruleset.allow_port(port, landlock.CONNECT_TCP)
            self.ruleset_fd = ruleset.detach()
        sockets = plan.seccomp_sockets
        self._filter = seccomp.Filter(seccomp.program(sockets)) if sockets is not None else None

    def hide(self) -> None:
        """In the job's child, while it still has the privileges it started with."""
        if self._hider is not None:
            self._hider.hide()

    def confine(self) -> None:
        """In the job's child, last: no_new_privs, the Landlock domain, the filter.
        Raises OSError naming the step that failed."""
        if self.plan.no_new_privs and _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            number = ctypes.get_errno()
            raise OSError(number, f"no_new_privs: {os.strerror(number)}")
        if self.ruleset_fd is not None:
            landlock.restrict_self(self.ruleset_fd)
            self.close()
        if self._filter is not None:
            self._filter.install()

    def close(self) -> None:
        """In a job's child: the ruleset's fd is no longer needed (or not its handler's)."""
        if self.ruleset_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.ruleset_fd)
            self.ruleset_fd = None


NONE = Enforcement(Plan(no_new_privs=False), ("", ""))


def probe() -> KernelSupport:
    """What this kernel, in this process's circumstances (a service manager's filters
    included), lets a job's child do."""
    seccomp_ok = seccomp.supported() and _libc.prctl(_PR_GET_SECCOMP, 0, 0, 0, 0) >= 0
    namespaces_error = _try_namespaces()
    landlock_abi, landlock_error = landlock.abi_version()
    return KernelSupport(
        landlock_abi=landlock_abi,
        landlock_error=landlock_error,
        seccomp=seccomp_ok,
        namespaces=not namespaces_error,
        namespaces_error=namespaces_error,
    )


def _try_namespaces() -> str:
    """Why a child cannot make the mount namespace `hiding` needs; "" if it can."""
    read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            os.close(read_fd)
            with_user = os.geteuid() != 0
            if _libc.unshare(0x00020000 | (0x10000000 if with_user else 0)) != 0:
                problem = "unshare: " + os.strerror(ctypes.get_errno())
            elif _libc.mount(None, b"/", None, 0x4000 | 0x80000, None) != 0:
                problem = "mount: " + os.strerror(ctypes.get_errno())
            else:
                problem = ""
            os.write(write_fd, problem.encode())
        finally:
            os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as reader:
        problem = reader.read().decode()
    os.waitpid(pid, 0)
    return problem
