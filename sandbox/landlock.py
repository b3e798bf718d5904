"""Landlock (Linux 5.13+), over its three system calls: a ruleset of file-system access
rights beneath paths, TCP ports (ABI 4) and scopes (ABI 6: signals and abstract unix
sockets stay inside the domain), made and then enforced on the calling thread and all
it will start. It cannot be lifted.

A small module of our own rather than a package from PyPI (`landlock` 1.0.0.dev5 has
file-system rules only; `py-landlock` 0.1 is new): the fork server builds a ruleset once
per handler and each job's child enforces it with one typed call (README, Install).
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat

# x86_64 and aarch64 (and every architecture since 5.13) share these numbers.
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2

# File-system rights (the ABI that brought them in the comments).
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5
# Rights a rule on a file (not a directory) may carry.
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
READ_ONLY = EXECUTE | READ_FILE | READ_DIR
# Network rights (ABI 4).
BIND_TCP = 1 << 0
CONNECT_TCP = 1 << 1
# Scopes (ABI 6).
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1

_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1}


def all_fs_rights(abi: int) -> int:
    """Every file-system right the kernel of Landlock ABI `abi` knows."""
    return _FS_BY_ABI.get(abi, (1 << 16) - 1) if abi > 0 else 0


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPortAttr(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


def _check(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")
    return result


def abi_version() -> tuple[int, str]:
    """The kernel's Landlock ABI version, and why it is 0 if it is: the kernel has none,
    it is disabled, or a seccomp filter (a service manager's) refuses it."""
    version = _syscall(
        ctypes.c_long(_SYS_CREATE_RULESET), None, ctypes.c_size_t(0),
        ctypes.c_uint32(_CREATE_RULESET_VERSION),
    )
    if version > 0:
        return int(version), ""
    number = ctypes.get_errno()
    why = {
        errno.ENOSYS: "this kernel has no Landlock",
        errno.EOPNOTSUPP: "Landlock is disabled in this kernel",
        errno.EPERM: "a system call filter refuses Landlock (systemd's SystemCallFilter?)",
    }
    return 0, why.get(number, f"Landlock: {os.strerror(number)}")


class Ruleset:
    """A ruleset being made: `allow_path` and `allow_port` add rules, `enforce` confines
    this process (no_new_privs must be set first, or CAP_SYS_ADMIN held)."""

    def __init__(self, *, fs: int = 0, net: int = 0, scoped: int = 0) -> None:
        attr = _RulesetAttr(fs, net, scoped)
        # An older kernel knows a shorter struct: pass only the fields in use.
        size = 24 if scoped else 16 if net else 8
        self._fd = _check(
            _syscall(ctypes.c_long(_SYS_CREATE_RULESET), ctypes.byref(attr),
                     ctypes.c_size_t(size), ctypes.c_uint32(0)),
            "landlock_create_ruleset",
        )
        self._fs = fs

    def allow_path(self, path: str, access: int) -> None:
        """Allow `access` beneath `path` (on it alone, for a file); a path that does not
        exist is skipped."""
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            return
        try:
            if not stat.S_ISDIR(os.fstat(fd).st_mode):
                access &= FILE_RIGHTS
            attr = _PathBeneathAttr(access & self._fs, fd)
            _check(
                _syscall(ctypes.c_long(_SYS_ADD_RULE), ctypes.c_int(self._fd),
                         ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(attr), ctypes.c_uint32(0)),
                f"landlock_add_rule({path})",
            )
        finally:
            os.close(fd)

    def allow_port(self, port: int, access: int) -> None:
        attr = _NetPortAttr(access, port)
        _check(
            _syscall(ctypes.c_long(_SYS_ADD_RULE), ctypes.c_int(self._fd),
                     ctypes.c_int(_RULE_NET_PORT), ctypes.byref(attr), ctypes.c_uint32(0)),
            f"landlock_add_rule(port {port})",
        )

    def enforce(self) -> None:
        try:
            restrict_self(self._fd)
        finally:
            os.close(self._fd)

    def detach(self) -> int:
        """The ruleset's fd, for `restrict_self` in processes forked later (made once,
        enforced by every job's child: that costs one system call)."""
        return self._fd


# Typed, on an instance of its own: it runs in every job's child, where converting
# untyped arguments would touch pages of ctypes that then have to be copied.
_restrict = ctypes.CDLL(None, use_errno=True).syscall
_restrict.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_uint32]
_restrict.restype = ctypes.c_long


def restrict_self(ruleset_fd: int) -> None:
    _check(_restrict(_SYS_RESTRICT_SELF, ruleset_fd, 0), "landlock_restrict_self")
