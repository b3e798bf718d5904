"""Each job's scratch directory: made by the fork server when it hands the job to a
child, private (mode 0700, the job's user's), and removed with everything in it when
the job ends. A reused child gets one directory for its life, removed when it is gone,
and makes each of its jobs a directory of its own in it, gone from its path at the
job's end: removed, or, if the job left it as it got it, set aside for the next
(`end_job_directory`).

All of a fork server's live in one directory of its own (`ScratchRoot.jobs`), made in
the temporary directory when it starts (under systemd's PrivateTmp, a private one): a
strict job's Landlock rules allow writing beneath it. The same directory holds the
decoys `sandbox.hiding` covers hidden paths with.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass

from sandbox import hiding


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
        self._by_job: dict[str, str] = {}
        self._count = 0

    def make(self, job_id: str, owner: tuple[int, int] | None) -> str:
        """A fresh directory for `job_id`, owned by `owner` (uid, gid) if given."""
        self._count += 1
        path = os.path.join(self.jobs, str(self._count))
        os.mkdir(path, 0o700)
        if owner is not None:
            os.chown(path, *owner)
        self._by_job[job_id] = path
        return path

    def rename(self, job_id: str, new_job_id: str) -> None:
        """`job_id`'s directory is `new_job_id`'s now (a reused child's next job)."""
        path = self._by_job.pop(job_id, None)
        if path is not None:
            self._by_job[new_job_id] = path

    def remove(self, job_id: str) -> str | None:
        """Remove `job_id`'s directory; what went wrong, if something did."""
        path = self._by_job.pop(job_id, None)
        if path is not None:
            try:
                _remove(path)
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
    """A reused child's job's directory, and which directory it was when made."""

    path: str
    device: int
    inode: int


_SET_ASIDE = "next"  # beside the numbered ones: the directory a job left as it got it


def make_job_directory(child_directory: str, number: int,
                       set_aside: JobDirectory | None = None) -> JobDirectory:
    """A fresh directory for a reused child's `number`th job, in the directory the fork
    server made for the child: the one set aside at the last job's end, under the new
    name, if there is one (`end_job_directory`)."""
    path = os.path.join(child_directory, str(number))
    if set_aside is not None:
        try:
            os.rename(set_aside.path, path)
            return JobDirectory(path, set_aside.device, set_aside.inode)
        except OSError:
            _remove(set_aside.path)
    os.mkdir(path, 0o700)
    made = os.lstat(path)
    return JobDirectory(path, made.st_dev, made.st_ino)


def end_job_directory(directory: JobDirectory) -> JobDirectory | None:
    """At a reused child's job's end, its directory's path is gone (the next job must not
    read what it left). A directory the job left as it got it is set aside for the next
    job (returned): a rename, where removing one and making the next costs a journal
    write each on a disk's file system (0.1-0.3 ms of the child's time between two
    jobs). Any other is removed with all in it; OSError if it cannot be."""
    if left_as_made(directory):
        set_aside = os.path.join(os.path.dirname(directory.path), _SET_ASIDE)
        try:
            os.rename(directory.path, set_aside)
            return JobDirectory(set_aside, directory.device, directory.inode)
        except OSError:
            pass
    _remove(directory.path)
    if os.path.lexists(directory.path):
        raise OSError(f"cannot remove {directory.path}")
    return None


def left_as_made(directory: JobDirectory) -> bool:
    """Whether a job left its directory as it got it: the same directory (none put in
    its place or mounted on it), empty, mode 0700, no extended attribute (an ACL is
    one)."""
    try:
        now = os.lstat(directory.path)
        if (now.st_dev, now.st_ino, now.st_mode) != (
                directory.device, directory.inode, stat.S_IFDIR | 0o700):
            return False
        if os.listxattr(directory.path, follow_symlinks=False):
            return False
        with os.scandir(directory.path) as entries:
            return next(entries, None) is None
    except OSError:
        return False
