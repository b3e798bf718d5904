"""Hiding paths from a job: a private mount namespace in which each hidden path is
covered by an empty decoy of mode 0 (a file over a file, a directory over a directory),
so that opening it fails with EACCES, while every other path stays as it was.

Landlock's rules allow beneath a path and cannot leave one file out; where no mount
namespace can be made, `sandbox.landlock_hiding` spells out rules for everything around
the hidden paths instead, at the price of their directories taking no new file.

Unprivileged, the mount namespace comes with a user namespace of its own that maps the
job's user and group to themselves; the capabilities it gives are dropped before the
handler runs (what Landlock then refuses: mounting or unmounting anything). A job of a
root supervisor has no user namespace; it loses the capabilities that read past file
modes (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER), or it could read the decoys.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable

_CLONE_NEWNS, _CLONE_NEWUSER = 0x00020000, 0x10000000
_MS_RDONLY, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_SLAVE = 0x1, 0x20, 0x1000, 0x4000, 0x80000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_NOATIME, _MS_NODIRATIME = 0x2, 0x4, 0x8, 0x400, 0x800
_MS_RELATIME, _MS_STRICTATIME, _ST_RELATIME = 1 << 21, 1 << 24, 0x1000
_PR_CAPBSET_DROP = 24
_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH, _CAP_FOWNER = 1, 2, 3
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_SYS_CAPGET, _SYS_CAPSET = 125, 126

# Typed, on an instance of their own: they run in every job's child (see landlock.py).
_libc = ctypes.CDLL(None, use_errno=True)
_libc.unshare.argtypes = [ctypes.c_int]
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                        ctypes.c_void_p]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                        ctypes.c_ulong]
_libc.syscall.argtypes = [ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
_DAC_CAPABILITIES = (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH, _CAP_FOWNER)


def _check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def make_decoys(directory: str) -> tuple[str, str]:
    """In the fork server: an empty file and an empty directory, both of mode 0, in
    `directory`; the decoys every job's hidden paths are covered with."""
    file, folder = os.path.join(directory, "decoy-file"), os.path.join(directory, "decoy-dir")
    os.close(os.open(file, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0))
    os.mkdir(folder, 0)
    os.chmod(file, 0)
    os.chmod(folder, 0)
    return file, folder


class Hider:
    """Made in the fork server, for the paths a handler's jobs must not see; `hide` runs
    in each job's child, before it drops privileges."""

    def __init__(self, paths: Iterable[str], decoys: tuple[str, str]) -> None:
        self._paths = [(path, path.encode()) for path in paths]
        self._decoys = (decoys[0].encode(), decoys[1].encode())
        uid, gid = os.geteuid(), os.getegid()
        self._privileged = uid == 0
        self._maps = (
            ("/proc/self/setgroups", b"deny"),
            ("/proc/self/uid_map", f"{uid} {uid} 1".encode()),
            ("/proc/self/gid_map", f"{gid} {gid} 1".encode()),
        )
        self._read_only = _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _kept_flags(decoys[0])
        self._header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
        self._caps = (_CapData * 2)()  # none at all, in a user namespace of its own
        if self._privileged:  # all we have but those that read past file modes
            _check(_libc.syscall(_SYS_CAPGET, ctypes.byref(self._header), self._caps),
                   "capget")
            for cap in _DAC_CAPABILITIES:
                word, bit = divmod(cap, 32)
                mask = ~(1 << bit) & 0xFFFFFFFF
                self._caps[word].effective &= mask
                self._caps[word].permitted &= mask
                self._caps[word].inheritable &= mask

    def hide(self) -> None:
        """Cover the paths that exist, in a mount namespace of this process's own.
        Raises OSError."""
        flags = _CLONE_NEWNS | (0 if self._privileged else _CLONE_NEWUSER)
        _check(_libc.unshare(flags), "unshare")
        if not self._privileged:
            for path, text in self._maps:
                _write(path, text)
        # Or, where / is shared, the decoys would show in the supervisor's namespace too.
        _check(_libc.mount(None, b"/", None, _MS_REC | _MS_SLAVE, None),
               "mount --make-rslave /")
        file, folder = self._decoys
        for path, encoded in self._paths:
            try:
                is_dir = os.path.isdir(path)
                if not is_dir and not os.path.lexists(path):
                    continue
            except OSError:
                continue
            _check(_libc.mount(folder if is_dir else file, encoded, None, _MS_BIND, None),
                   f"cannot hide {path}")
            # Read-only, or the job (the decoys' owner) could chmod one and write in it.
            _check(_libc.mount(None, encoded, None, self._read_only, None),
                   f"cannot hide {path}")
        if self._privileged:
            for cap in _DAC_CAPABILITIES:
                _check(_libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0), "cannot drop a capability")
        _check(_libc.syscall(_SYS_CAPSET, ctypes.byref(self._header), self._caps), "capset")


def hide(paths: Iterable[str], decoys: tuple[str, str]) -> None:
    """`Hider(paths, decoys).hide()`, in one go."""
    Hider(paths, decoys).hide()


def _kept_flags(path: str) -> int:
    """The flags of the mount `path` is on that a remount must keep: in a user namespace
    they are locked (nosuid, nodev, noexec, the atime mode), and leaving one out fails."""
    flags = os.statvfs(path).f_flag
    kept = flags & (_MS_NOSUID | _MS_NODEV | _MS_NOEXEC | _MS_NOATIME | _MS_NODIRATIME)
    if flags & _ST_RELATIME:
        kept |= _MS_RELATIME
    elif not flags & _MS_NOATIME:
        kept |= _MS_STRICTATIME
    return kept


def _write(path: str, text: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text)
    finally:
        os.close(fd)
