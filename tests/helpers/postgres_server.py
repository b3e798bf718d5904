"""A real, throwaway PostgreSQL server for tests (Debian's `postgresql` package):
`initdb` and `pg_ctl` run as the `postgres` user (they refuse root) in a temporary
directory, on a free port of 127.0.0.1, with fsync, synchronous_commit and
full_page_writes off for speed (`durable=True` leaves them at PostgreSQL's defaults, on, as
users run it: the benchmarks' servers).  Always `-l LOGFILE`: without it the server keeps
the caller's stdout and a captured `subprocess.run` never returns."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

from tests.helpers.redis_server import free_port


def _bin() -> Path:
    """Debian's newest PostgreSQL (`POOLSUP_PG_BIN` names another directory)."""
    if "POOLSUP_PG_BIN" in os.environ:
        return Path(os.environ["POOLSUP_PG_BIN"])
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                   key=lambda path: int(path.parent.parent.name)
                   if path.parent.parent.name.isdigit() else 0)
    return found[-1].parent if found else Path("/usr/lib/postgresql/15/bin")


BIN = _bin()
DATABASE = "pool"
# What the tests' servers turn off: no commit waits for its WAL to reach the disk.
FAST = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


def _as_postgres(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    command = [str(arg) for arg in args]
    if os.geteuid() == 0:
        command = ["runuser", "-u", "postgres", "--", *command]
    return subprocess.run(command, capture_output=True, text=True, check=check, timeout=120)


def _owned_by_postgres(path: Path) -> None:
    if os.geteuid() == 0:
        entry = pwd.getpwnam("postgres")
        os.chown(path, entry.pw_uid, entry.pw_gid)


class PostgresServer:
    """One server.  `start()` after `stop()` keeps its port and data; `url` names the
    database `pool`, as the superuser `postgres` (trust authentication on 127.0.0.1,
    except for users made with a password: see `add_user`).  `settings` are passed as
    `-c name=value` over the defaults: FAST's, unless `durable`, and max_connections 200."""

    def __init__(self, port: int | None = None, *, primary: PostgresServer | None = None,
                 settings: dict[str, str] | None = None, durable: bool = False) -> None:
        self.port = port or free_port()
        self._dir = Path(tempfile.mkdtemp(prefix="poolsup-pg-"))
        self._dir.chmod(0o755)
        _owned_by_postgres(self._dir)
        self.data = self._dir / "data"
        self.log = self._dir / "log"
        self.settings = {**({} if durable else FAST), "max_connections": "200",
                         **(settings or {})}
        if primary is None:
            _as_postgres(BIN / "initdb", "-D", self.data, "-U", "postgres", "--auth=trust",
                         "-E", "UTF8", "--no-sync")
            with open(self.data / "pg_hba.conf", "a") as hba:
                hba.write("host all all 127.0.0.1/32 trust\n")
        else:  # a streaming standby of `primary`
            _as_postgres(BIN / "pg_basebackup", "-D", self.data, "-R", "-h", "127.0.0.1",
                         "-p", str(primary.port), "-U", "postgres", "-X", "stream", "-c", "fast")
        self._created = primary is not None

    @property
    def url(self) -> str:
        return self.url_as("postgres")

    def fresh_database(self) -> str:
        """A new, empty database on this server; its URL, as the superuser."""
        name = f"db_{uuid.uuid4().hex[:8]}"
        self.psql(f"CREATE DATABASE {name}")
        return self.url_as("postgres", database=name)

    def url_as(self, user: str, password: str | None = None, database: str = DATABASE) -> str:
        auth = user if password is None else f"{user}:{password}"
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{database}"

    def start(self) -> PostgresServer:
        options = " ".join([f"-p {self.port}", f"-k {self._dir}",
                            "-c listen_addresses=127.0.0.1",
                            *(f"-c {name}={value}" for name, value in self.settings.items())])
        _as_postgres(BIN / "pg_ctl", "-D", self.data, "-l", self.log, "-w", "-t", "60",
                     "-o", options, "start")
        if not self._created:
            _as_postgres(BIN / "createdb", "-h", "127.0.0.1", "-p", str(self.port),
                         "-U", "postgres", DATABASE)
            self._created = True
        return self

    def stop(self, mode: str = "fast") -> None:
        if (self.data / "postmaster.pid").exists():
            _as_postgres(BIN / "pg_ctl", "-D", self.data, "-m", mode, "-w", "stop", check=False)

    def restart(self) -> None:
        self.stop()
        self.start()

    def promote(self) -> None:
        _as_postgres(BIN / "pg_ctl", "-D", self.data, "-w", "promote")

    def psql(self, sql: str, database: str = DATABASE) -> str:
        done = _as_postgres(BIN / "psql",
                            "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                            "-d", database, "-At", "-v", "ON_ERROR_STOP=1", "-c", sql)
        return done.stdout.strip()

    def add_user(self, name: str, password: str, *grants: str) -> str:
        """A login role that must give its password (scram) over TCP, with `grants` (SQL
        run as the superuser after its creation); its URL."""
        self.psql(f"CREATE ROLE {name} LOGIN PASSWORD '{password}'")
        for grant in grants:
            self.psql(grant)
        hba = self.data / "pg_hba.conf"
        hba.write_text(f"host all {name} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
        _as_postgres(BIN / "pg_ctl", "-D", self.data, "reload")
        return self.url_as(name, password)

    def remove(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self._dir, ignore_errors=True)
