"""The fork server's scratch directories: private, removed whatever a job left in them,
and what a killed fork server left is removed by the next."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from sandbox.scratch import ScratchRoot


def test_a_job_directory_is_private_and_removed_with_everything_in_it(tmp_path: Path) -> None:
    root = ScratchRoot(str(tmp_path))
    path = Path(root.make("job-1", None))
    assert path.parent == Path(root.jobs) and oct(path.stat().st_mode & 0o777) == "0o700"
    (path / "deep" / "er").mkdir(parents=True)
    (path / "deep" / "er" / "file").write_text("x")
    (path / "deep").chmod(0)  # what a job may leave
    assert root.remove("job-1") is None
    assert not path.exists()
    assert root.remove("job-1") is None  # twice: nothing to do
    root.close()
    assert not Path(root.path).exists()


def test_what_a_fork_server_that_is_gone_left_is_removed(tmp_path: Path) -> None:
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    orphan = tmp_path / f"poolsup-{dead}-abc"
    (orphan / "jobs" / "1").mkdir(parents=True)
    alive = tmp_path / f"poolsup-{os.getpid()}-def"
    alive.mkdir()
    ScratchRoot(str(tmp_path))
    assert not orphan.exists()
    assert alive.exists()


def born(path: str) -> str:
    """Its birth (statx), which tells a directory made again from one kept: an inode's
    number is given again at once."""
    return subprocess.run(["stat", "--format=%w", path], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_a_directory_left_as_made_is_the_next_jobs_under_its_own_path(tmp_path: Path) -> None:
    root = ScratchRoot(str(tmp_path))
    first = root.make("job-1", None)
    birth = born(first)
    time.sleep(0.01)  # a birth of its own for a new one (the clock is coarse)
    assert root.remove("job-1") is None
    assert not os.path.exists(first)  # gone from its path when its job ends
    second = root.make("job-2", None)
    assert second != first
    assert born(second) == birth  # no directory made: the first, renamed
    assert oct(os.stat(second).st_mode & 0o777) == "0o700" and os.listdir(second) == []
    root.close()


@pytest.mark.parametrize("change", ["file", "emptied", "mode", "replaced", "after"])
def test_a_directory_changed_is_never_the_next_jobs(tmp_path: Path, change: str) -> None:
    """Whatever its job changed (or anything after, in the directory set aside), the
    next job gets a new, empty 0700 directory; a file made and removed changes nothing."""
    root = ScratchRoot(str(tmp_path))
    first = root.make("job-1", None)
    birth = born(first)
    time.sleep(0.01)  # a birth of its own for a new one (the clock is coarse)
    if change in ("file", "emptied"):
        Path(first, "left").write_text("secret")
        if change == "emptied":
            Path(first, "left").unlink()
    elif change == "mode":
        os.chmod(first, 0o755)
    elif change == "replaced":
        os.rmdir(first)
        os.mkdir(first, 0o700)
    assert root.remove("job-1") is None
    assert not os.path.exists(first)
    if change == "after":  # in the directory set aside, a job that writes beneath jobs/
        (aside,) = (name for name in os.listdir(root.jobs) if name.startswith("aside-"))
        Path(root.jobs, aside, "planted").write_text("for the next job")
    second = root.make("job-2", None)
    assert oct(os.stat(second).st_mode & 0o777) == "0o700" and os.listdir(second) == []
    assert (born(second) == birth) == (change == "emptied"), change
    root.close()


def test_a_directory_is_the_next_jobs_of_its_owner_only(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root, to give a directory to another user")
    root = ScratchRoot(str(tmp_path))
    nobody = (65534, 65534)
    first = root.make("job-1", nobody)
    birth = born(first)
    time.sleep(0.01)
    assert root.remove("job-1") is None
    mine = root.make("job-2", None)
    assert born(mine) != birth and os.stat(mine).st_uid == os.geteuid()
    theirs = root.make("job-3", nobody)
    assert born(theirs) == birth and (os.stat(theirs).st_uid, os.stat(theirs).st_gid) == nobody
    root.close()
