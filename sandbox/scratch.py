"""Each job's scratch directory: made by the fork server when it hands the job to a
child, private (mode 0700, the job's user's), and removed with everything in it when
the job ends. A reused child gets one directory for its life, removed when it is gone,
and makes each of its jobs a directory of its own in it, removed at the job's end
(`job_directory`).

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
import tempfile

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



def make_job_directory(child_directory: str, number: int) -> str:
    """A fresh directory for a reused child's `number`th job, in the directory the fork
    server made for the child."""
    path = os.path.join(child_directory, str(number))
    os.mkdir(path, 0o700)
    return path


def remove_job_directory(path: str) -> None:
    """Remove a reused child's job's directory with all in it, at the job's end (the
    next job must not read it); raises OSError if it is still there."""
    _remove(path)
    if os.path.lexists(path):
        raise OSError(f"cannot remove {path}")
