"""The sandbox's mechanisms on this kernel, each in a forked child confined as a job's
child is (`sandbox.enforce`), as root and as an unprivileged user (whose mount namespace
comes with a user namespace): what they refuse, and what they leave alone."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sandbox import enforce
from sandbox.hiding import make_decoys
from sandbox.policy import SandboxSpec, plan

KERNEL = enforce.probe()
NOBODY = 65534
needs_kernel = pytest.mark.skipif(
    KERNEL.landlock_abi < 6 or not KERNEL.namespaces,
    reason=f"this kernel cannot sandbox: {KERNEL}",
)
_libc = ctypes.CDLL(None, use_errno=True)


def in_sandbox(spec: SandboxSpec, tmp_path: Path, body: Callable[[], object],
               *, uid: int | None = None) -> str:
    """Run `body` in a child confined by `spec`; what it returned, or the error it raised
    (`errno` name)."""
    folder = tmp_path / "decoys"
    folder.mkdir(mode=0o755, exist_ok=True)
    decoys = (str(folder / "decoy-file"), str(folder / "decoy-dir"))
    if not os.path.exists(decoys[0]):
        make_decoys(str(folder))
    decided = plan(spec, KERNEL, str(tmp_path / "scratch"))
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read_fd)
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
                _libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE, as a process started as uid is
            # Made where the fork server would make it: as the user jobs start as.
            enforcement = enforce.Enforcement(decided, decoys)
            enforcement.hide()
            enforcement.confine()
            try:
                answer = f"ok {body()!r}"
            except OSError as error:
                answer = f"error {errno_name(error.errno)}"
            os.write(write_fd, answer.encode())
        except BaseException as error:
            os.write(write_fd, f"setup failed: {error!r}".encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as reader:
        answer = reader.read().decode()
    os.waitpid(pid, 0)
    return answer


def errno_name(number: int | None) -> str:
    import errno

    return errno.errorcode.get(number or 0, str(number))


def ptrace_attach(pid: int) -> int:
    if _libc.ptrace(16, pid, None, None) != 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))
    _libc.ptrace(17, pid, None, None)
    return 0


def unshare(flags: int) -> int:
    if _libc.unshare(flags) != 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))
    return 0


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A directory every user can reach (pytest's own is its owner's alone)."""
    path = Path(tempfile.mkdtemp(prefix="poolsup-sandbox-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    (tmp_path / "scratch").mkdir(mode=0o777, exist_ok=True)
    (tmp_path / "scratch").chmod(0o777)
    path = tmp_path / "pool.toml"
    path.write_text("password = 'hunter2'\n")
    path.chmod(0o644)  # readable by the unprivileged user too: only the sandbox stops it
    return path


@needs_kernel
@pytest.mark.parametrize("uid", [None, NOBODY], ids=["root", "unprivileged"])
@pytest.mark.parametrize("profile", ["default", "strict"])
def test_hidden_files_are_refused_and_their_neighbours_are_not(
    tmp_path: Path, secret: Path, uid: int | None, profile: str,
) -> None:
    spec = SandboxSpec(profile=profile, hidden=(str(secret),))
    assert in_sandbox(spec, tmp_path, secret.read_text, uid=uid) == "error EACCES"
    written = in_sandbox(spec, tmp_path, lambda: secret.write_text("x"), uid=uid)
    assert written in ("error EACCES", "error EROFS")
    # The decoy is the job's user's own file: read-only, so that no job can open it up.
    assert in_sandbox(spec, tmp_path, lambda: secret.chmod(0o666), uid=uid) == "error EROFS"
    # A mount could uncover it: Landlock refuses it even to root.
    umount = lambda: _libc.umount2(str(secret).encode(), 2) or 0  # noqa: E731
    assert in_sandbox(spec, tmp_path, umount, uid=uid) == "ok -1"
    if profile == "default":
        beside = tmp_path / "scratch" / "ledger.txt"  # a file made after the sandbox
        write_then_read = lambda: (beside.write_text("a"), beside.read_text())[1]  # noqa: E731
        assert in_sandbox(spec, tmp_path, write_then_read, uid=uid) == "ok 'a'"
    assert "hunter2" in secret.read_text()


@needs_kernel
@pytest.mark.parametrize("uid", [None, NOBODY], ids=["root", "unprivileged"])
def test_default_refuses_signals_and_ptrace_outside_the_job(
    tmp_path: Path, secret: Path, uid: int | None,
) -> None:
    spec = SandboxSpec(hidden=(str(secret),))
    parent = os.getpid()
    assert in_sandbox(spec, tmp_path, lambda: os.kill(parent, 0), uid=uid) == "error EPERM"
    assert in_sandbox(spec, tmp_path, lambda: ptrace_attach(parent), uid=uid) == "error EPERM"

    def own_child() -> int:  # inside the job's own tree, a signal goes through
        pid = os.fork()
        if pid == 0:
            signal.pause()
        os.kill(pid, signal.SIGKILL)
        return os.waitpid(pid, 0)[1]

    assert in_sandbox(spec, tmp_path, own_child, uid=uid) == f"ok {signal.SIGKILL.value}"


@needs_kernel
def test_strict_refuses_writes_sockets_and_namespaces(tmp_path: Path, secret: Path) -> None:
    spec = SandboxSpec(profile="strict", network="none")
    assert in_sandbox(spec, tmp_path, lambda: (tmp_path / "x").write_text("x")) == "error EACCES"
    scratch_file = tmp_path / "scratch" / "x"
    assert in_sandbox(spec, tmp_path, lambda: scratch_file.write_text("x")) == "ok 1"
    devnull = lambda: Path("/dev/null").write_text("x")  # noqa: E731
    assert in_sandbox(spec, tmp_path, devnull) == "ok 1"
    assert in_sandbox(spec, tmp_path, lambda: socket.socket(socket.AF_INET)) == "error EPERM"
    assert in_sandbox(spec, tmp_path, lambda: unshare(0x10000000)) == "error EPERM"
    pair = lambda: len(socket.socketpair())  # noqa: E731
    assert in_sandbox(spec, tmp_path, pair) == "ok 2"
