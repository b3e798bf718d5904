"""Handlers for the sandbox tests (tests/integration/test_sandbox.py): `attempt` tries
one thing a sandbox must refuse and raises what the kernel answered, or returns
{"done": ...} if it was let through; `scratch` and `reasonable` do what any job may."""

import ctypes
import os
import signal
import socket
import subprocess
import threading
import time

_PTRACE_ATTACH, _PTRACE_DETACH = 16, 17
_libc = ctypes.CDLL(None, use_errno=True)


def _ptrace(pid):
    if _libc.ptrace(_PTRACE_ATTACH, pid, None, None) != 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))
    _libc.ptrace(_PTRACE_DETACH, pid, None, None)
    return "attached"


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]


def _vm_read(pid):
    """process_vm_readv of 16 bytes of `pid`: the access check (as for ptrace) comes before
    the address is looked at, so a refusal is EPERM and a pass EFAULT or the bytes."""
    buffer = ctypes.create_string_buffer(16)
    local = _IoVec(ctypes.cast(buffer, ctypes.c_void_p), 16)
    remote = _IoVec(0x400000, 16)
    if _libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) < 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))
    return "read"


def _mount(target):
    if _libc.mount(b"none", target.encode(), b"tmpfs", 0, None) != 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))
    return "mounted"


def _bpf():
    # BPF_PROG_LOAD of nothing: refused before the kernel looks at the program.
    attr = ctypes.create_string_buffer(128)
    if _libc.syscall(321, 5, attr, 128) < 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))
    return "loaded"


def _connect_abstract(name):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect("\0" + name)
    return "connected"


def _connect_path(path):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
    return "connected"


def _connect_tcp(port):
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        return "connected"


def _read(path):
    with open(path, "rb") as file:
        return len(file.read())


def _environ(pid):
    with open(f"/proc/{pid}/environ", "rb") as file:
        return file.read().decode(errors="replace").replace("\0", "")


def _write(path):
    with open(path, "a") as file:
        file.write("written by a job\n")
    return "written"


ACTIONS = {
    "sigkill": lambda target: os.kill(target, signal.SIGKILL),
    "sigstop": lambda target: os.kill(target, signal.SIGSTOP),
    "ptrace": _ptrace,
    "vm_read": _vm_read,
    "environ": lambda target: _environ(target),
    "read": _read,
    "write": _write,
    "connect_abstract": _connect_abstract,
    "connect_path": _connect_path,
    "connect_tcp": _connect_tcp,
    "mount": _mount,
    "bpf": lambda target: _bpf(),
}


def attempt(job):
    action, target = job.payload["action"], job.payload.get("target")
    return {"done": ACTIONS[action](target)}


def sleeper(job):
    """Another job: notes its pid, then sleeps."""
    with open(job.payload["pid_file"], "w") as file:
        file.write(str(os.getpid()))
    time.sleep(job.payload["seconds"])
    return {"slept": job.payload["seconds"]}


def scratch(job):
    """Writes in its scratch directory; returns where."""
    assert os.environ["POOLSUP_JOB_SCRATCH"] == job.scratch, (os.environ, job.scratch)
    path = os.path.join(job.scratch, "sub", "file.txt")
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as file:
        file.write("x" * 1000)
    os.chmod(os.path.dirname(path), 0o500)  # a job may leave it hard to remove
    return {"scratch": job.scratch, "mode": oct(os.stat(job.scratch).st_mode & 0o777)}


def reasonable(job):
    """What an ordinary handler does: files, a subprocess, threads, a network call."""
    directory = job.payload.get("directory") or job.scratch
    path = os.path.join(directory, f"reasonable-{job.key}.txt")
    with open(path, "w") as file:
        file.write("hello")
    with open(path) as file:
        text = file.read()
    os.unlink(path)
    echoed = subprocess.run(["sh", "-c", "echo from a subprocess"], capture_output=True,
                            text=True, check=True).stdout.strip()
    results = []
    threads = [threading.Thread(target=lambda n=n: results.append(n * n)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    received = None
    if job.payload.get("port"):
        with socket.create_connection(("127.0.0.1", job.payload["port"]), timeout=5) as sock:
            received = sock.recv(16).decode()
    return {"text": text, "echoed": echoed, "threads": sorted(results), "received": received}
