"""Running under systemd: the notify protocol on a real datagram socket, the watchdog,
what jobs inherit, and the log formats, against real `poolsup run` processes."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import psutil
import pytest

from supervisor.config import SupervisorConfig
from supervisor.service.sd_notify import Notifier, take_service_environment
from tests.helpers.pool import SupervisorProcess, finished, wait_for, write_pool
from tests.helpers.redis_server import RedisServer
from tests.integration.conftest import Pool

Message = dict[str, str]


class NotifySocket:
    """A service manager's end: a bound AF_UNIX datagram socket, and a thread that
    records each message with the time it came."""

    def __init__(self, address: str | bytes) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address)
        self.sock.settimeout(0.05)
        self.messages: list[tuple[float, Message]] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while not self._closing.is_set():
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            fields = dict(line.split("=", 1) for line in data.decode().splitlines())
            with self._lock:
                self.messages.append((time.monotonic(), fields))

    def receive(self) -> list[Message]:
        """Every message that came in so far, oldest first."""
        with self._lock:
            return [fields for _, fields in self.messages]

    def close(self) -> None:
        self._closing.set()
        self._reader.join()
        self.sock.close()


@pytest.fixture
def notify_path(tmp_path: Path) -> Iterator[tuple[str, NotifySocket]]:
    path = str(tmp_path / "notify.sock")
    listener = NotifySocket(path)
    yield path, listener
    listener.close()


def test_notifier_sends_fields_to_a_socket_path(notify_path: tuple[str, NotifySocket]) -> None:
    path, listener = notify_path
    notifier = Notifier(path)
    notifier.send("READY=1", "STATUS=0/4 jobs running, store ok")
    notifier.close()
    received = wait_for(listener.receive, 10)
    assert received == [{"READY": "1", "STATUS": "0/4 jobs running, store ok"}]


def test_notifier_sends_to_an_abstract_socket() -> None:
    name = f"poolsup-test-{uuid.uuid4().hex}"
    listener = NotifySocket("\0" + name)
    try:
        notifier = Notifier("@" + name)
        notifier.send("READY=1")
        notifier.close()
        assert wait_for(listener.receive, 10) == [{"READY": "1"}]
    finally:
        listener.close()


def test_notifier_without_a_socket_does_nothing() -> None:
    notifier = Notifier(None)
    assert not notifier.active
    notifier.send("READY=1")


def test_notifier_logs_once_and_never_raises_when_the_socket_is_gone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    notifier = Notifier(str(tmp_path / "nobody-listens.sock"))
    with caplog.at_level(logging.WARNING, logger="poolsup.systemd"):
        notifier.send("READY=1")
        notifier.send("STATUS=still here")
    notifier.close()
    assert len(caplog.records) == 1
    assert "could not notify the service manager" in caplog.records[0].getMessage()


def test_the_service_variables_are_taken_out_of_the_environment() -> None:
    environ = {"NOTIFY_SOCKET": "@sock", "WATCHDOG_USEC": "4000000", "PATH": "/bin"}
    service = take_service_environment(environ)
    assert service.notify_socket == "@sock"
    assert service.watchdog_interval == 2.0
    assert environ == {"PATH": "/bin"}


# -- a real `poolsup run` talking to a real notify socket

WATCHDOG_USEC = 2_000_000  # pings every second


@pytest.fixture
def sqlite_pool(tmp_path: Path, pool_name: str) -> Iterator[Pool]:
    """The notify protocol does not depend on the store: one store is enough."""
    pool = Pool(tmp_path, f"sqlite:///{tmp_path}/pool.db", pool_name)
    yield pool
    pool.close()


def notify_env(path: str, *, watchdog_usec: int | None = WATCHDOG_USEC) -> dict[str, str]:
    env = {"NOTIFY_SOCKET": path}
    if watchdog_usec is not None:
        env["WATCHDOG_USEC"] = str(watchdog_usec)
    return env


def wait_message(
    listener: NotifySocket, predicate: Callable[[Message], bool], timeout: float = 20.0,
    *, after: int = 0,
) -> int:
    """The index of the first message from `after` on that satisfies `predicate`."""
    def found() -> int | None:
        for index, message in enumerate(listener.receive()[after:], start=after):
            if predicate(message):
                return index + 1  # wait_for wants a truthy value
        return None
    return int(wait_for(found, timeout, message="a notify message")) - 1


def pings_between(listener: NotifySocket, start: float, end: float) -> int:
    time.sleep(0.2)  # for the reader to take in what came by `end`
    return sum(1 for at, message in list(listener.messages)
               if "WATCHDOG" in message and start <= at <= end)


def has(name: str, value: str | None = None) -> Callable[[Message], bool]:
    return lambda message: name in message and (value is None or message[name] == value)


def test_notify_ready_status_watchdog_reload_and_stopping_in_order(
    sqlite_pool: Pool, notify_path: tuple[str, NotifySocket]
) -> None:
    path, listener = notify_path
    config = sqlite_pool.config({"sleeps": {"path": "basic.py", "function": "sleeps"}},
                                capacity=2, drain_timeout=1, stop_grace=1)
    supervisor = sqlite_pool.start(config, serving=False, env=notify_env(path))
    ready = wait_message(listener, has("READY", "1"))
    wait_for(lambda: "serving pool" in supervisor.log(), 5, message="the log line")
    assert listener.receive()[ready]["STATUS"] == "0/2 jobs running, store ok"
    first_ping = wait_message(listener, has("WATCHDOG", "1"), after=ready)
    wait_message(listener, has("WATCHDOG", "1"), after=first_ping + 1)

    sqlite_pool.client().dispatch("busy", {"seconds": 60}, handler="sleeps")
    wait_message(listener, has("STATUS", "1/2 jobs running, store ok"), after=ready)

    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    supervisor.signal(signal.SIGHUP)
    reloading = wait_message(listener, has("RELOADING", "1"), after=ready + 1)
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert before <= int(listener.receive()[reloading]["MONOTONIC_USEC"]) <= after
    reloaded = wait_message(listener, has("READY", "1"), after=reloading)
    # The log's writer thread writes a batch at a time (service/logs.py BATCH_WAIT), so
    # the line may reach the file a moment after READY.
    wait_for(lambda: "handlers reloaded" in supervisor.log(), 2,
             message="the reload's log line")

    supervisor.signal(signal.SIGTERM)
    stopping = wait_message(listener, has("STOPPING", "1"), after=reloaded)
    assert supervisor.wait(30) == 0
    assert ready < first_ping < reloading < reloaded < stopping


def test_a_drain_asks_systemd_for_more_stop_time_while_it_lasts(
    sqlite_pool: Pool, notify_path: tuple[str, NotifySocket]
) -> None:
    path, listener = notify_path
    config = sqlite_pool.config({"sleeps": {"path": "basic.py", "function": "sleeps"}},
                                drain_timeout=30)
    supervisor = sqlite_pool.start(config, env=notify_env(path, watchdog_usec=None))
    client = sqlite_pool.client()
    client.dispatch("short", {"seconds": 4}, handler="sleeps")
    wait_for(lambda: client.job("short")["state"] == "running", 20)
    supervisor.signal(signal.SIGTERM)
    stopping = wait_message(listener, has("STOPPING", "1"))
    extend = wait_message(listener, has("EXTEND_TIMEOUT_USEC"), after=stopping)
    assert int(listener.receive()[extend]["EXTEND_TIMEOUT_USEC"]) >= 5_000_000
    assert supervisor.wait(30) == 0
    assert finished(client, "short")["state"] == "succeeded"
    assert "draining: 1 job(s) left, store ok" in [
        message.get("STATUS") for message in listener.receive()[stopping:]
    ]


def fork_server_of(supervisor: SupervisorProcess) -> psutil.Process:
    (server,) = [child for child in psutil.Process(supervisor.pid).children()
                 if "sandbox.forkserver" in " ".join(child.cmdline())]
    return server


def test_a_frozen_fork_server_stops_the_watchdog_pings(
    sqlite_pool: Pool, notify_path: tuple[str, NotifySocket]
) -> None:
    path, listener = notify_path
    config = sqlite_pool.config({"echo": {"path": "basic.py", "function": "echo"}})
    supervisor = sqlite_pool.start(config, env=notify_env(path))
    wait_message(listener, has("WATCHDOG", "1"))
    server = fork_server_of(supervisor)
    server.suspend()
    try:
        frozen_at = time.monotonic()
        time.sleep(4.0)
        # One ping may have been on its way when the fork server froze.
        assert pings_between(listener, frozen_at + 1.5, time.monotonic()) == 0
        assert "watchdog not pinged: the fork server did not answer" in supervisor.log()
    finally:
        server.resume()
    resumed = len(listener.receive())
    wait_message(listener, has("WATCHDOG", "1"), after=resumed)


def test_a_store_outage_shows_in_the_status_and_the_watchdog_pings_go_on(
    tmp_path: Path, pool_name: str, own_redis: RedisServer,
    notify_path: tuple[str, NotifySocket],
) -> None:
    path, listener = notify_path
    pool = Pool(tmp_path, own_redis.url, pool_name)
    try:
        config = pool.config({"echo": {"path": "basic.py", "function": "echo"}})
        pool.start(config, env=notify_env(path))
        wait_message(listener, has("STATUS", "0/4 jobs running, store ok"))
        own_redis.stop()
        failing = wait_message(listener, has("STATUS", "0/4 jobs running, store failing"))
        outage_seen_at = time.monotonic()
        time.sleep(3.0)
        assert pings_between(listener, outage_seen_at, time.monotonic()) >= 2
        own_redis.start()
        wait_message(listener, has("STATUS", "0/4 jobs running, store ok"), 30, after=failing)
    finally:
        pool.close()


def test_a_stalled_event_loop_withholds_the_ping_after_it(
    sqlite_pool: Pool, notify_path: tuple[str, NotifySocket]
) -> None:
    path, listener = notify_path
    config = sqlite_pool.config({"echo": {"path": "basic.py", "function": "echo"}})
    supervisor = sqlite_pool.start(config, env=notify_env(path))
    wait_message(listener, has("WATCHDOG", "1"))
    supervisor.signal(signal.SIGSTOP)
    try:
        stopped_at = time.monotonic()
        time.sleep(3.0)
        assert pings_between(listener, stopped_at + 0.2, time.monotonic()) == 0
    finally:
        supervisor.signal(signal.SIGCONT)
    resumed = len(listener.receive())
    wait_message(listener, has("WATCHDOG", "1"), after=resumed)
    wait_for(lambda: "watchdog not pinged: the event loop ran" in supervisor.log(), 10,
             message="the late tick to be logged")


ENVIRONMENT_HANDLER = """
import os

def run(job):
    return sorted(os.environ)
"""


@pytest.mark.parametrize("inherit_env", [False, True])
def test_jobs_never_see_the_service_managers_variables(
    sqlite_pool: Pool, notify_path: tuple[str, NotifySocket], tmp_path: Path, inherit_env: bool
) -> None:
    path, _listener = notify_path
    handler = tmp_path / "environment.py"
    handler.write_text(ENVIRONMENT_HANDLER)
    config = sqlite_pool.config({"env": {"path": str(handler), "inherit_env": inherit_env}})
    sqlite_pool.start(config, env={**notify_env(path), "WATCHDOG_PID": str(os.getpid()),
                                   "SOMETHING_ELSE": "x"})
    client = sqlite_pool.client()
    client.dispatch("env", None, handler="env")
    names = set(wait_for(lambda: finished(client, "env"), 20)["result"])
    assert not names & {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"}
    assert ("SOMETHING_ELSE" in names) == inherit_env


# -- log formats


def json_lines_about(sqlite_pool: Pool, key: str, *args: str) -> tuple[list[dict[str, Any]], int]:
    """The JSON log lines of a supervisor (started with `args`) that mention `key`, once
    it ran that job to its end, and the job's token."""
    config = sqlite_pool.config({"echo": {"path": "basic.py", "function": "echo"}})
    supervisor = sqlite_pool.start(config, serving=False, args=("--log-format", "json", *args))
    wait_for(lambda: "serving pool" in supervisor.log(), 20, message="serving")
    client = sqlite_pool.client()
    client.dispatch(key, {}, handler="echo")
    token: int = wait_for(lambda: finished(client, key), 20)["token"]
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(30) == 0
    lines = [orjson.loads(line) for line in supervisor.log().splitlines()]
    assert all({"time", "level", "logger", "message"} <= line.keys() for line in lines)
    return [line for line in lines if key in line["message"]], token


def test_json_log_lines_parse_and_carry_each_jobs_key_and_token(sqlite_pool: Pool) -> None:
    key = "odd] key (token 0) %s %d"
    about_the_job, token = json_lines_about(sqlite_pool, key, "--log-level", "debug")
    assert [line["level"] for line in about_the_job] == ["DEBUG", "INFO"]  # started, succeeded
    assert all((line["key"], line["token"]) == (key, token) for line in about_the_job)
    assert all(line["message"].startswith(f"[{key}] ") for line in about_the_job)
    assert about_the_job[-1]["message"] == f"[{key}] succeeded (token {token})"


def test_a_finished_job_writes_one_info_line(sqlite_pool: Pool) -> None:
    """Its start is a DEBUG line: at INFO, the supervisor's log work per job is one line."""
    about_the_job, token = json_lines_about(sqlite_pool, "quiet-1")
    assert [(line["level"], line["message"]) for line in about_the_job] == [
        ("INFO", f"[quiet-1] succeeded (token {token})")]


STUBBORN_PRINTER = """
import signal, time

def run(job):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("a line of the job's own", flush=True)
    while True:
        time.sleep(0.05)
"""


def test_json_log_lines_of_a_jobs_output_and_its_kill_carry_its_token(
    sqlite_pool: Pool, tmp_path: Path
) -> None:
    handler = tmp_path / "stubborn.py"
    handler.write_text(STUBBORN_PRINTER)
    config = sqlite_pool.config({"stubborn": {"path": str(handler)}}, stop_grace=1)
    supervisor = sqlite_pool.start(config, serving=False, args=("--log-format", "json"))
    wait_for(lambda: "serving pool" in supervisor.log(), 20, message="serving")
    client = sqlite_pool.client()
    client.dispatch("stubborn-1", {}, handler="stubborn")
    wait_for(lambda: "a line of the job's own" in supervisor.log(), 20, message="output")
    token = client.stop("stubborn-1")["token"]
    # The log's writer thread writes a batch at a time (service/logs.py, BATCH_WAIT):
    # the kill's line may reach the file a moment after the stored stop.
    wait_for(lambda: "did not stop within stop_grace" in supervisor.log(), 5,
             message="the kill's line")
    lines = [orjson.loads(line) for line in supervisor.log().splitlines()]
    about_the_job = [line for line in lines if "stubborn-1" in line["message"]]
    assert any("a line of the job's own" in line["message"] for line in about_the_job)
    assert any("did not stop within stop_grace" in line["message"] for line in about_the_job)
    assert all((line.get("key"), line.get("token")) == ("stubborn-1", token)
               for line in about_the_job), about_the_job


def test_text_log_lines_in_the_journal_have_a_priority_and_no_timestamp(
    sqlite_pool: Pool, tmp_path: Path
) -> None:
    config = sqlite_pool.config({"echo": {"path": "basic.py", "function": "echo"}})
    log_path = tmp_path / "journal.log"
    log_path.touch()
    stat = log_path.stat()
    supervisor = SupervisorProcess(config, log_path).start(
        {"JOURNAL_STREAM": f"{stat.st_dev}:{stat.st_ino}"}
    )
    sqlite_pool.supervisors.append(supervisor)
    supervisor.wait_serving()
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(30) == 0
    lines = supervisor.log().splitlines()
    assert "<6>INFO poolsup: supervisor" in lines[0]
    assert all(line.startswith(("<6>", "<4>", "<3>")) for line in lines)


def test_text_log_lines_elsewhere_have_a_timestamp(sqlite_pool: Pool, tmp_path: Path) -> None:
    config = sqlite_pool.config({"echo": {"path": "basic.py", "function": "echo"}})
    # JOURNAL_STREAM inherited from a unit, while stderr was redirected elsewhere.
    supervisor = sqlite_pool.start(config, env={"JOURNAL_STREAM": "1:1"})
    first = supervisor.log().splitlines()[0]
    assert first[:2] == "20" and " INFO poolsup: " in first


# -- store passwords


PASSWORD = "s3cret-of-the-store"
WRONG_PASSWORD = "wr0ng-guess-of-the-store"


@pytest.fixture
def redis_with_password() -> Iterator[RedisServer]:
    server = RedisServer(password=PASSWORD).start()
    yield server
    server.remove()


def poolsup(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "supervisor.cli", *args],
                          capture_output=True, text=True, timeout=60)


def test_store_passwords_appear_in_no_log_error_or_output(
    tmp_path: Path, pool_name: str, redis_with_password: RedisServer
) -> None:
    pool = Pool(tmp_path, redis_with_password.url, pool_name)
    try:
        handlers = {"echo": {"path": "basic.py", "function": "echo"}}
        config = pool.config(handlers)
        supervisor = pool.start(config, args=("--log-level", "DEBUG"))
        outputs: list[str] = []
        for command in (["check"], ["dispatch", "k1", "--payload", "{}"], ["status"],
                        ["status", "--json"], ["jobs"], ["job", "k1"]):
            result = poolsup(*command, "-c", str(config))
            assert result.returncode == 0, result.stderr
            outputs += [result.stdout, result.stderr]

        # While the store is down, the supervisor's error lines name it.
        redis_with_password.stop()
        wait_for(lambda: "store failing" in supervisor.log(), 20, message="a store failure")
        status = poolsup("status", "-c", str(config))
        assert status.returncode == 1
        outputs += [status.stdout, status.stderr]
        redis_with_password.start()
        wait_for(lambda: "store works again" in supervisor.log(), 30, message="recovery")

        # A wrong password is refused by the store; the error shows neither.
        wrong_url = redis_with_password.url.replace(PASSWORD, WRONG_PASSWORD)
        wrong = write_pool(tmp_path, store=wrong_url, pool=pool_name, handlers=handlers,
                           name="wrong.toml")
        refused = poolsup("status", "-c", str(wrong))
        assert refused.returncode == 1
        assert "127.0.0.1" in refused.stderr
        outputs += [refused.stdout, refused.stderr]
        waiting = pool.start(wrong, serving=False)
        wait_for(lambda: "store failing" in waiting.log(), 20, message="a refused login")

        # A URL the config refuses is quoted without its password.
        bad_scheme = write_pool(tmp_path, store=f"redis+tls://:{PASSWORD}@h/0", pool=pool_name,
                                handlers=handlers, name="bad.toml")
        rejected = poolsup("check", "-c", str(bad_scheme))
        assert rejected.returncode == 2
        outputs += [rejected.stdout, rejected.stderr]

        supervisor.signal(signal.SIGTERM)
        supervisor.wait(30)
        everything = "\n".join(outputs) + pool.logs()
        assert "k1" in everything and "store failing" in everything
        assert PASSWORD not in everything
        assert WRONG_PASSWORD not in everything
    finally:
        pool.close()


# -- the units


UNITS_DIR = Path(__file__).resolve().parents[2] / "systemd"
SHIPPED_BINARY = "/opt/poolsup/venv/bin/poolsup"
MAX_EXPOSURE = 2.0
needs_systemd_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed"
)


@pytest.fixture(params=[("poolsup.service", "poolsup.service"),
                        ("poolsup@.service", "poolsup@media.service")], ids=lambda p: p[0])
def unit(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A copy of a shipped unit (an instance, for the template) whose ExecStart names
    an executable that exists here, for `verify` to check everything else."""
    shipped, name = request.param
    text = (UNITS_DIR / shipped).read_text()
    assert SHIPPED_BINARY in text
    copy = tmp_path / name
    copy.write_text(text.replace(SHIPPED_BINARY, shutil.which("poolsup") or sys.executable))
    return copy


@needs_systemd_analyze
def test_units_verify_cleanly(unit: Path) -> None:
    result = subprocess.run(["systemd-analyze", "verify", "--man=false", str(unit)],
                            capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


@needs_systemd_analyze
def test_units_are_hardened_to_an_exposure_of_at_most_2(unit: Path) -> None:
    result = subprocess.run(
        ["systemd-analyze", "security", "--offline=true",
         f"--threshold={int(MAX_EXPOSURE * 10)}", str(unit)],
        capture_output=True, text=True, timeout=60,
    )
    overall = [line for line in result.stdout.splitlines() if "Overall exposure level" in line]
    assert len(overall) == 1, result.stdout + result.stderr
    assert float(overall[0].split(":")[1].split()[0]) <= MAX_EXPOSURE, overall[0]
    assert result.returncode == 0, overall[0]


def unit_settings(shipped: str) -> dict[str, str]:
    text = (UNITS_DIR / shipped).read_text()
    return dict(line.split("=", 1) for line in text.splitlines()
                if "=" in line and not line.startswith("#"))


@pytest.mark.parametrize("shipped", ["poolsup.service", "poolsup@.service"])
def test_units_speak_the_notify_protocol_and_outwait_a_default_drain(shipped: str) -> None:
    settings = unit_settings(shipped)
    assert {name: settings.get(name) for name in (
        "Type", "NotifyAccess", "KillMode", "Restart", "RestartPreventExitStatus", "LimitMEMLOCK",
    )} == {"Type": "notify", "NotifyAccess": "main", "KillMode": "mixed",
           "Restart": "on-failure", "RestartPreventExitStatus": "2", "LimitMEMLOCK": "infinity"}
    assert settings["WatchdogSec"].endswith("s")
    defaults = SupervisorConfig(id="x")
    drain = defaults.drain_timeout + defaults.stop_grace + defaults.lease_ttl
    assert float(settings["TimeoutStopSec"].removesuffix("s")) > drain
