"""The hostile set of tests/integration/test_sandbox.py against a supervisor that systemd
runs with the shipped unit, in a throwaway systemd-nspawn container; a manual check
(docs/sandbox.md, "Under systemd"). Prints one line per attempt.

Set up as tests/integration/test_sandbox_systemd.py does (a volatile container of the
host's /usr booted by systemd-nspawn, the unit, config and a sysusers.d entry for the
poolsup user bound in), with this checkout in /opt/poolsup/venv, tests/handlers/
sandbox_hostile.py copied to /opt/poolsup/handlers/, a pool.toml in /etc/poolsup with
handlers `hostile` (function `attempt`), `hostile_strict` (the same, with
`sandbox = {profile = "strict", network = [16400]}`), `sleeper`, `scratch` and
`reasonable`, a redis-server on 127.0.0.1:REDIS_PORT, and systemd-nspawn given
`--system-call-filter="landlock_create_ruleset landlock_add_rule landlock_restrict_self"`
(systemd 252's nspawn filters them). Then, in the container as the service's user:

    setpriv --reuid=poolsup --regid=poolsup --init-groups -- \
        /opt/poolsup/venv/bin/python systemd_hostile.py /etc/poolsup/pool.toml MAINPID \
        REDIS_PORT sqlite|redis [WORK]

WORK (default /var/lib/poolsup) is where the driver and its sleeper write their socket and
pid file (tests/container/test_sandbox_in_container.py runs it inside the image with /tmp).
It exits 0 if every attempt was refused with EPERM, EACCES or EROFS, the supervisor, its fork
server and the other job are untouched, a reasonable handler works, and a scratch
directory is gone after its job (tests/integration/test_sandbox_systemd.py runs it).
"""

import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from supervisor import Client

config, main_pid, redis_port, store = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
# Where the driver and its sleeper write: beside the store unless told otherwise (in a
# container whose sandbox hides the store with Landlock, its directory takes no new file).
work = sys.argv[5] if len(sys.argv) > 5 else "/var/lib/poolsup"
client = Client.from_config(config)
supervisor = psutil.Process(main_pid)
fork_server = next(
    c for c in supervisor.children() if "sandbox.forkserver" in " ".join(c.cmdline())
)
abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
abstract.bind("\0poolsup-box-outside")
abstract.listen(4)
path_sock = f"{work}/outside.sock"
if os.path.exists(path_sock):
    os.unlink(path_sock)
unix_path = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
unix_path.bind(path_sock)
unix_path.listen(4)
tcp = socket.socket()
tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
tcp.bind(("127.0.0.1", 16400))
tcp.listen(4)


def answer() -> None:
    while True:
        c, _ = tcp.accept()
        c.sendall(b"hi")
        c.close()


threading.Thread(target=answer, daemon=True).start()
run = f"{int(time.time())}"


def job(key: str, handler: str, payload: dict[str, Any], timeout: float = 30) -> dict[str, Any]:
    key = f"{run}-{key}"
    client.dispatch(key, payload, handler=handler)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record: dict[str, Any] = client.job(key)
        if record["state"] in ("succeeded", "failed", "stopped"):
            return record
        time.sleep(0.05)
    return {"state": "timeout", "error": "never ended"}


pid_file = f"{work}/sleeper.pid"
if os.path.exists(pid_file):
    os.unlink(pid_file)
client.dispatch(f"{run}-other", {"pid_file": pid_file, "seconds": 120}, handler="sleeper")
deadline = time.monotonic() + 30
while not os.path.exists(pid_file) or not Path(pid_file).read_text():
    if time.monotonic() > deadline:
        sys.exit(f"the sleeper never started: {client.job(f'{run}-other')}")
    time.sleep(0.05)
other = psutil.Process(int(Path(pid_file).read_text()))
database = "/var/lib/poolsup/pool.db"
problems: list[str] = []
for handler in ("hostile", "hostile_strict"):
    attempts: list[tuple[str, dict[str, Any]]] = [
        ("read config", {"action": "read", "target": config}),
        ("write config", {"action": "write", "target": config}),
        ("connect abstract", {"action": "connect_abstract", "target": "poolsup-box-outside"}),
        ("ptrace supervisor", {"action": "ptrace", "target": supervisor.pid}),
        ("read supervisor memory", {"action": "vm_read", "target": supervisor.pid}),
        ("read fork server memory", {"action": "vm_read", "target": fork_server.pid}),
    ]
    if store == "sqlite":
        attempts += [("read store", {"action": "read", "target": database}),
                     ("read store wal", {"action": "read", "target": database + "-wal"})]
    if handler == "hostile_strict":
        attempts += [
            ("connect path socket", {"action": "connect_path", "target": path_sock}),
            ("write outside scratch", {"action": "write", "target": f"{work}/x.txt"}),
            ("tcp to redis", {"action": "connect_tcp", "target": redis_port}),
            ("mount", {"action": "mount", "target": work}),
            ("bpf", {"action": "bpf"}),
        ]
    for name, pid in (("other job", other.pid), ("fork server", fork_server.pid),
                      ("supervisor", supervisor.pid)):
        attempts += [(f"SIGSTOP {name}", {"action": "sigstop", "target": pid}),
                     (f"SIGKILL {name}", {"action": "sigkill", "target": pid})]
    for number, (name, payload) in enumerate(attempts):
        record = job(f"{handler}-{number}", handler, payload)
        error = record.get("error")
        outcome = error.splitlines()[0] if error else record.get("result")
        print(f"{handler:15} {name:22} {record['state']:9} {str(outcome)[:90]}", flush=True)
        if record["state"] != "failed" or not any(
            code in (error or "") for code in ("[Errno 1]", "[Errno 13]", "[Errno 30]")
        ):
            problems.append(f"{handler}: {name} was not refused")
for name, process in (("supervisor", supervisor), ("fork server", fork_server),
                      ("other job", other)):
    print(f"{name}: {process.status()}, same pid {process.is_running()}")
    if not process.is_running() or process.status() in (psutil.STATUS_STOPPED,
                                                         psutil.STATUS_ZOMBIE):
        problems.append(f"the {name} was touched")
record = job("reasonable", "reasonable", {"port": 16400})
print("reasonable (default):", record["state"], record.get("result") or record.get("error"))
if record["state"] != "succeeded":
    problems.append("a reasonable handler failed")
record = job("scratch", "scratch", {})
print("scratch:", record["state"], record.get("result") or record.get("error"))
inside = f"/proc/{supervisor.pid}/root{(record.get('result') or {}).get('scratch')}"
time.sleep(0.5)
if record["state"] != "succeeded" or os.path.exists(inside):
    problems.append("the scratch directory was not there, or not gone after the job")
client.stop(f"{run}-other", wait=False)
print("\n".join(problems) or "all refused")
sys.exit(1 if problems else 0)
