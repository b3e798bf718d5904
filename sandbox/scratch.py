"""Each job's scratch directory: made by the fork server when it hands the job to a
child, private (mode 0700, the job's user's), and gone from its path when the job ends:
removed with everything in it, or, if the job left it as it got it (`left_as_made`),
set aside (renamed) to be the next job's under the next job's own path. Most jobs never
write there: two renames then cost a few microseconds where a directory made and one
removed cost a journal write each on a disk's file system (0.1-0.3 ms under load). A
reused child gets one directory for its life, removed when it is gone, and makes each of
its jobs a directory of its own in it, the same way (`make_job_directory`,
`end_job_directory`).

All of a fork server's live in one directory of its own (`ScratchRoot.jobs`), made in
the temporary directory when it starts (under systemd's PrivateTmp, a private one): a
strict job's Landlock rules allow writing beneath it. The same directory holds the
decoys `sandbox.hiding` covers hidden paths with.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass

from sandbox import hiding

Owner = tuple[int, int]  # uid, gid

MOST_SET_ASIDE = 8  # per owner, in a fork server: more are removed


class ScratchRoot:
    def __init__(self, parent: str | None = None) -> None:
        """Named after this process; what a fork server that is gone (killed) left is
        removed first."""
        directory = parent or tempfile.gettempdir()
        for stale in glob.glob(os.path.join(glob.escape(directory), "poolsup-*-*")):
            _remove_if_orphaned(stale)
        self.path = tempfile.mkdtemp(prefix=f"poolsup-{os.getpid()}-", dir=directory)
        os.chmod(self.path, 0o711)  # a job of another user reaches its own directory
        self.jobs = os.path.join(self.path, "jobs")
        os.mkdir(self.jobs, 0o711)
        self.decoys = hiding.make_decoys(self.path)
        self._by_job: dict[str, tuple[JobDirectory, Owner | None]] = {}
        self._set_aside: dict[Owner | None, list[JobDirectory]] = {}
        self._count = 0

    def make(self, job_id: str, owner: Owner | None) -> str:
        """A fresh directory for `job_id`, owned by `owner` (uid, gid) if given."""
        self._count += 1
        set_aside = self._set_aside.get(owner)
        directory = take_directory(os.path.join(self.jobs, str(self._count)),
                                   set_aside.pop() if set_aside else None, owner)
        self._by_job[job_id] = (directory, owner)
        return directory.path

    def rename(self, job_id: str, new_job_id: str) -> None:
        """`job_id`'s directory is `new_job_id`'s now (a reused child's next job)."""
        made = self._by_job.pop(job_id, None)
        if made is not None:
            self._by_job[new_job_id] = made

    def remove(self, job_id: str) -> str | None:
        """`job_id`'s directory gone from its path, set aside for a later job of the same
        owner if it was left as made; what went wrong, if something did."""
        made = self._by_job.pop(job_id, None)
        if made is None:
            return None
        directory, owner = made
        kept = self._set_aside.setdefault(owner, [])
        try:
            if len(kept) < MOST_SET_ASIDE:
                self._count += 1
                aside = set_aside(directory, os.path.join(self.jobs, f"aside-{self._count}"))
                if aside is not None:
                    kept.append(aside)
            else:
                remove_directory(directory.path)
        except OSError as error:
            return f"cannot remove the scratch directory of {job_id}: {error}"
        return None

    def close(self) -> None:
        _remove(self.path)


def _remove_if_orphaned(path: str) -> None:
    pid = os.path.basename(path).split("-")[1]
    try:
        if not pid.isdigit() or os.stat(path).st_uid != os.geteuid():
            return
        os.kill(int(pid), 0)
    except ProcessLookupError:
        _remove(path)
    except OSError:
        pass


def _remove(path: str) -> None:
    """Remove `path` and all in it, whatever modes a job gave what it left there."""
    try:
        os.rmdir(path)  # most jobs leave it empty: one call, where rmtree makes six
        return
    except FileNotFoundError:
        return
    except OSError:
        pass
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        return
    except OSError:
        with contextlib.suppress(OSError):
            os.chmod(path, 0o700)
        for directory, names, _ in os.walk(path):  # top-down: a child's mode before its turn
            for name in names:
                with contextlib.suppress(OSError):
                    os.chmod(os.path.join(directory, name), 0o700)
        shutil.rmtree(path, ignore_errors=True)


@dataclass(frozen=True)
class JobDirectory:
    """A job's directory, and which directory it was when made."""

    path: str
    device: int
    inode: int
    owner: Owner


_SET_ASIDE = "next"  # beside a reused child's numbered ones: its last job's, left as made


def take_directory(path: str, aside: JobDirectory | None,
                   owner: Owner | None = None) -> JobDirectory:
    """A fresh directory at `path`: `aside` renamed there if it is still as it was made,
    else a new one, owned by `owner` if given."""
    if aside is not None:
        if (moved := _moved_if_as_made(aside, path)) is not None:
            return moved
        _remove(aside.path)
    os.mkdir(path, 0o700)
    if owner is not None:
        os.chown(path, *owner)
    made = os.lstat(path)
    return JobDirectory(path, made.st_dev, made.st_ino, (made.st_uid, made.st_gid))


def set_aside(directory: JobDirectory, aside: str) -> JobDirectory | None:
    """At its job's end, `directory` leaves its path (the next job must not read what it
    left): renamed to `aside` if the job left it as it got it (returned, for
    `take_directory`), else removed with all in it; OSError if it cannot be."""
    if (moved := _moved_if_as_made(directory, aside)) is not None:
        return moved
    remove_directory(directory.path)
    return None


def _moved_if_as_made(directory: JobDirectory, path: str) -> JobDirectory | None:
    """`directory` renamed to `path`, if it is as it was made and the rename worked."""
    if not left_as_made(directory):
        return None
    try:
        os.rename(directory.path, path)
    except OSError:
        return None
    return dataclasses.replace(directory, path=path)


def left_as_made(directory: JobDirectory) -> bool:
    """Whether a job left its directory as it got it: the same directory (none put in
    its place or mounted on it), empty, mode 0700, its owner's, no extended attribute
    (an ACL is one)."""
    try:
        now = os.lstat(directory.path)
        if (now.st_dev, now.st_ino, now.st_mode, (now.st_uid, now.st_gid)) != (
                directory.device, directory.inode, stat.S_IFDIR | 0o700, directory.owner):
            return False
        if os.listxattr(directory.path, follow_symlinks=False):
            return False
        with os.scandir(directory.path) as entries:
            return next(entries, None) is None
    except OSError:
        return False


def remove_directory(path: str) -> None:
    """Remove `path` with all in it; OSError if it is still there."""
    _remove(path)
    if os.path.lexists(path):
        raise OSError(f"cannot remove {path}")


def make_job_directory(child_directory: str, number: int,
                       aside: JobDirectory | None = None) -> JobDirectory:
    """A fresh directory for a reused child's `number`th job, in the directory the fork
    server made for the child: the last job's, set aside, if there is one."""
    return take_directory(os.path.join(child_directory, str(number)), aside)


def end_job_directory(directory: JobDirectory) -> JobDirectory | None:
    """A reused child's job's directory, at the job's end: set aside for its next job
    (returned), or removed (`set_aside`)."""
    return set_aside(directory, os.path.join(os.path.dirname(directory.path), _SET_ASIDE))
