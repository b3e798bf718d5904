"""A host that cannot give the default sandbox all it asks (here: a service manager's
filter that refuses Landlock) runs the jobs with what it can, and says once, in the log
and in `status`, what it could not."""

from __future__ import annotations

import os
from pathlib import Path

from tests.acceptance.test_cli import poolsup
from tests.helpers.pool import wait_for
from tests.integration.conftest import Pool

# Loaded by every Python process started with this directory first on PYTHONPATH: a
# seccomp filter that answers ENOSYS to landlock_create_ruleset, as an old kernel does.
NO_LANDLOCK = """
import ctypes, errno, struct

def _op(code, k, jt=0, jf=0):
    return struct.pack("=HBBI", code, jt, jf, k)

_program = (_op(0x20, 0) + _op(0x15, 444, 0, 1) + _op(0x06, 0x00050000 | errno.ENOSYS)
            + _op(0x06, 0x7FFF0000))
_buffer = ctypes.create_string_buffer(_program, len(_program))

class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

_fprog = _Fprog(len(_program) // 8, ctypes.addressof(_buffer))
_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl(38, 1, 0, 0, 0)
_libc.prctl(22, 2, ctypes.byref(_fprog), 0, 0)
"""


def test_status_says_what_the_default_sandbox_cannot_enforce_here(
    pool: Pool, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NO_LANDLOCK)
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))
    config = pool.config({"echo": {"path": "outcomes.py", "function": "async_echo"}})
    supervisor = pool.start(config, env={"PYTHONPATH": path})
    client = pool.client()
    client.dispatch("k", {}, handler="echo")
    wait_for(lambda: client.job("k")["state"] == "succeeded", 20, message="the job to run")

    notes = wait_for(lambda: client.status()["supervisors"][0]["sandbox_notes"], 10,
                     message="the notes in status")

    assert len(notes) == 1 and notes[0].startswith("echo: cannot ")
    assert "Landlock" in notes[0]
    assert f"sandbox on {client.status()['supervisors'][0]['id']}: echo: cannot" in poolsup(
        "status", "-c", str(config)).stdout
    assert supervisor.log().count("its sandbox cannot") == 1
