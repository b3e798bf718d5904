"""The strict profile's system-call filter: a seccomp BPF program, built here (pure:
`program`) and loaded with prctl (`install`). Refused calls fail with EPERM, never a
kill, so that a handler gets an error it can report.

What it refuses: tracing other processes (ptrace, process_vm_readv/writev), BPF, perf
events, mounts and new namespaces (mount and the new mount API, unshare, setns, clone
with a CLONE_NEW* flag; clone3, whose flags a filter cannot read, answers ENOSYS so
that the C library falls back to clone), keyrings, kexec, kernel modules, reboot, swap,
opening files by handle, and sockets of other families than those `sockets` names.
x86_64 only (`supported`); the numbers are that architecture's.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from collections.abc import Iterable

_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_BIT = 0x40000000
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_LD_W_ABS, _JEQ, _JSET, _RET = 0x20, 0x15, 0x45, 0x06
_NR, _ARCH, _ARG0 = 0, 4, 16  # offsets in struct seccomp_data (arg0's low half)
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2

REFUSED = {
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
    "bpf": 321, "perf_event_open": 298,
    "mount": 165, "umount2": 166, "pivot_root": 155, "open_tree": 428, "move_mount": 429,
    "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
    "unshare": 272, "setns": 308,
    "keyctl": 250, "add_key": 248, "request_key": 249,
    "kexec_load": 246, "kexec_file_load": 320,
    "init_module": 175, "finit_module": 313, "delete_module": 176,
    "reboot": 169, "swapon": 167, "swapoff": 168,
    "open_by_handle_at": 304, "iopl": 172, "ioperm": 173,
}
_CLONE, _CLONE3, _SOCKET = 56, 435, 41
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
_CLONE_NEW_NAMESPACES = 0x00020000 | 0x7E000000


def supported() -> bool:
    """Whether this machine's architecture is one the filter is written for."""
    return platform.machine() == "x86_64"


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program(sockets: Iterable[int]) -> bytes:
    """The filter: EPERM for `REFUSED`, for clone with a new namespace and for a socket
    of a family not in `sockets`; ENOSYS for clone3; any other call allowed."""
    eperm = _RET_ERRNO | errno.EPERM
    families = sorted(set(sockets))
    body = [_op(_LD_W_ABS, _NR), _op(_JSET, _X32_BIT, 0, 1), _op(_RET, eperm)]
    for number in sorted(REFUSED.values()):
        body += [_op(_JEQ, number, 0, 1), _op(_RET, eperm)]
    body += [_op(_JEQ, _CLONE3, 0, 1), _op(_RET, _RET_ERRNO | errno.ENOSYS)]
    # clone: refused if any CLONE_NEW* flag is set in its first argument.
    body += [
        _op(_JEQ, _CLONE, 0, 4),
        _op(_LD_W_ABS, _ARG0),
        _op(_JSET, _CLONE_NEW_NAMESPACES, 0, 1),
        _op(_RET, eperm),
        _op(_RET, _RET_ALLOW),
    ]
    # socket: allowed for the families in `sockets` only.
    body += [_op(_JEQ, _SOCKET, 0, 2 + 2 * len(families)), _op(_LD_W_ABS, _ARG0)]
    for family in families:
        body += [_op(_JEQ, family, 0, 1), _op(_RET, _RET_ALLOW)]
    body += [_op(_RET, eperm), _op(_RET, _RET_ALLOW)]
    arch = [_op(_LD_W_ABS, _ARCH), _op(_JEQ, _AUDIT_ARCH_X86_64, 1, 0), _op(_RET, eperm)]
    return b"".join(arch + body)


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong,
                        ctypes.c_ulong]
_libc.prctl.restype = ctypes.c_int


class Filter:
    """A filter made ready in the fork server; `install` in a job's child is then one
    system call (two with no_new_privs, which it needs)."""

    def __init__(self, filter_program: bytes) -> None:
        self._buffer = ctypes.create_string_buffer(filter_program, len(filter_program))
        self._fprog = _Fprog(len(filter_program) // 8, ctypes.addressof(self._buffer))
        self._address = ctypes.addressof(self._fprog)

    def install(self) -> None:
        for option, value, pointer in (
            (_PR_SET_NO_NEW_PRIVS, 1, None),
            (_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, self._address),
        ):
            if _libc.prctl(option, value, pointer, 0, 0) != 0:
                number = ctypes.get_errno()
                raise OSError(number, f"seccomp: {os.strerror(number)}")


def install(filter_program: bytes) -> None:
    """Load `filter_program` on this thread (inherited by all it starts)."""
    Filter(filter_program).install()
