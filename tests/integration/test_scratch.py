"""The fork server's scratch directories: private, removed whatever a job left in them,
and what a killed fork server left is removed by the next."""

from __future__ import annotations

import os
from pathlib import Path

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
