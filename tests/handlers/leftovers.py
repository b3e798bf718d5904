"""Handlers that leave a daemon behind: a grandchild in a session of its own, whose
parent exits, noting its pid in the file the payload names (`pid_file`)."""

import os
import time


def _start_daemon(job):
    megabytes = int(job.payload.get("megabytes", 0))
    read_fd, write_fd = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            # Touched memory makes its death take a while: the kernel frees it first.
            ballast = b"x" * (megabytes << 20)
            with open(job.payload["pid_file"], "a") as file:
                file.write(f"{job.attempt} {os.getpid()}\n")
            os.write(write_fd, b"x")
            time.sleep(600)
            del ballast
        os._exit(0)
    os.close(write_fd)
    os.read(read_fd, 1)
    os.close(read_fd)


def leaves_daemon(job):
    """Start a daemon and return."""
    _start_daemon(job)
    return {"left": "a daemon"}


def daemon_then_sleep(job):
    """Note which daemons of earlier attempts are still alive, start one, then sleep."""
    alive = []
    if os.path.exists(job.payload["pid_file"]):
        with open(job.payload["pid_file"]) as file:
            for line in file:
                pid = int(line.split()[1])
                if _alive(pid):
                    alive.append(pid)
    with open(job.payload["pid_file"] + ".starts", "a") as file:
        file.write(f"{job.attempt} {' '.join(map(str, alive))}\n")
    _start_daemon(job)
    while True:
        time.sleep(0.05)


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 :].split()[0] != b"Z"
