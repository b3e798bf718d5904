"""Hiding paths from a job: a private mount namespace in which each hidden path is
covered by an empty decoy of mode 0 (a file over a file, a directory over a directory),
so that opening it fails with EACCES, while every other path stays as it was.

Landlock alone cannot do this: its rules allow beneath a path and cannot leave one file
out. Unprivileged, the mount namespace comes with a user namespace of its own that maps
the job's user and group to themselves; the capabilities it gives are dropped before the
handler runs (what Landlock then refuses: mounting or unmounting anything). A job of a
root supervisor has no user namespace; it loses the capabilities that read past file
modes (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER), or it could read the decoys.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable

_CLONE_NEWNS, _CLONE_NEWUSER = 0x00020000, 0x10000000
_MS_BIND, _MS_REC, _MS_SLAVE = 0x1000, 0x4000, 0x80000
_PR_CAPBSET_DROP = 24
_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH, _CAP_FOWNER = 1, 2, 3
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_SYS_CAPGET, _SYS_CAPSET = 125, 126

_libc = ctypes.CDLL(None, use_errno=True)


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


def hide(paths: Iterable[str], decoys: tuple[str, str]) -> None:
    """In a job's child, before it drops privileges: cover `paths` (those that exist)
    in a mount namespace of its own. Raises OSError."""
    uid, gid = os.geteuid(), os.getegid()
    privileged = uid == 0
    _check(_libc.unshare(_CLONE_NEWNS | (0 if privileged else _CLONE_NEWUSER)), "unshare")
    if not privileged:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    # Or, where / is shared, the decoys would show in the supervisor's namespace too.
    _check(_libc.mount(None, b"/", None, _MS_REC | _MS_SLAVE, None), "mount --make-rslave /")
    file, folder = decoys
    for path in paths:
        try:
            is_dir = os.path.isdir(path)
            if not is_dir and not os.path.lexists(path):
                continue
        except OSError:
            continue
        source = folder if is_dir else file
        _check(_libc.mount(source.encode(), path.encode(), None, _MS_BIND, None),
               f"cannot hide {path}")
    if privileged:
        for cap in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH, _CAP_FOWNER):
            _check(_libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0), "cannot drop a capability")
        _drop_capabilities(keep_all_but=(_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH, _CAP_FOWNER))
    else:
        _drop_capabilities(keep_all_but=None)


def _drop_capabilities(keep_all_but: tuple[int, ...] | None) -> None:
    """Clear the effective, permitted and inheritable sets (`keep_all_but` None), or
    only the capabilities it names."""
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if keep_all_but is not None:
        _check(_libc.syscall(_SYS_CAPGET, ctypes.byref(header), data), "capget")
        for cap in keep_all_but:
            word, bit = divmod(cap, 32)
            mask = ~(1 << bit) & 0xFFFFFFFF
            data[word].effective &= mask
            data[word].permitted &= mask
            data[word].inheritable &= mask
    _check(_libc.syscall(_SYS_CAPSET, ctypes.byref(header), data), "capset")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
