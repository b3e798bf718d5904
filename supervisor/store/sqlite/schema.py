"""Opening a SQLite store file: the path checks, the connection settings, the schema
and its version, and the named SQL statements of `sql/queries.sql`.

Every problem with the file itself (missing directory, read-only, corrupt, written by a
newer poolsup) is a `ConfigError` naming the path; a file locked by another process for
too long is `StoreUnavailable`.

Lease deadlines and supervisors' last_seen times count on this host's CLOCK_BOOTTIME,
which means nothing after a reboot: the file keeps the boot id it counts on and the
machine ids that used it during that boot.  A file opened under another boot id of one
of those machines has every running lease expired and its membership entries dropped
(nobody from the old boot is alive), in the transaction that opens it; one that another
machine's boot wrote is refused; an opener that cannot read its boot id changes nothing
(`core/host_boot.py`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sqlite3
import stat
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import TypeVar

from supervisor.core.host_boot import BootCheck, check_boot
from supervisor.errors import ConfigError, StoreUnavailable
from supervisor.store.sql import statements

SCHEMA_VERSION = 15
BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")
MACHINE_ID_FILES = (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"))
MIN_SQLITE_VERSION = (3, 35, 0)  # RETURNING, UPDATE ... FROM, json_each
BUSY_TIMEOUT_MS = 5000
# After SQLite's own busy timeout gives up, the whole transaction is tried again after
# each of these pauses before the caller gets `StoreUnavailable`.
BUSY_RETRY_PAUSES = (0.05, 0.2, 0.5)

_BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
_UNAVAILABLE_CODES = _BUSY_CODES | {sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL}
_BOOT_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_MACHINE_ID = re.compile(r"[0-9a-f]{32}")
_T = TypeVar("_T")
Clocks = Callable[[], tuple[float, float]]  # (wall, boot)


def path_from_url(url: str) -> Path:
    """`sqlite:///abs/file.db` and `sqlite:////abs/file.db` -> `/abs/file.db`."""
    scheme, _, rest = url.partition("://")
    if scheme != "sqlite" or not rest.strip("/"):
        raise ConfigError(f"SQLite store URL {url!r} must look like sqlite:///path/to/file.db")
    if rest.startswith("/"):
        rest = "/" + rest.lstrip("/")
    return Path(rest).absolute()


@functools.cache
def load_queries() -> dict[str, str]:
    """The named statements: sql/queries.sql's and those of store/sql/queries.sql."""
    text = resources.files("supervisor.store.sqlite").joinpath("sql/queries.sql").read_text("utf-8")
    shared = {name: statements.for_sqlite(body) for name, body in statements.shared().items()}
    return statements.merged(statements.sections(text), shared)


def schema_statements() -> list[str]:
    text = resources.files("supervisor.store.sqlite").joinpath("sql/schema.sql").read_text("utf-8")
    statements: list[str] = []
    pending = ""
    for line in text.splitlines(keepends=True):
        if not pending and (not line.strip() or line.lstrip().startswith("--")):
            continue
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    return statements


def is_busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in _BUSY_CODES


def retry_when_busy(action: Callable[[], _T]) -> _T:
    """Run `action`, again after each pause while the database stays locked."""
    for pause in (*BUSY_RETRY_PAUSES, None):
        try:
            return action()
        except sqlite3.Error as exc:
            if not is_busy(exc) or pause is None:
                raise
        time.sleep(pause)
    raise AssertionError("unreachable")  # pragma: no cover


def boot_id() -> str | None:
    """This boot of the host; None where it cannot be read (a unit with ProcSubset=pid,
    a container that hides /proc/sys: then the file reads as empty, or is missing)."""
    return _read_id(BOOT_ID_FILE, _BOOT_ID)


def machine_id() -> str | None:
    """This host's machine id (systemd's, stable across reboots); None if it has none."""
    for path in MACHINE_ID_FILES:
        if (found := _read_id(path, _MACHINE_ID)) is not None:
            return found
    return None


def _read_id(path: Path, form: re.Pattern[str]) -> str | None:
    try:
        text = path.read_text(errors="replace").strip().lower()
    except OSError:
        return None
    return text if form.fullmatch(text) else None


def open_connection(url: str, pool: str, clocks: Clocks) -> tuple[sqlite3.Connection, Path]:
    """A connection to the store file, in WAL mode, with the current schema."""
    path = path_from_url(url)
    if sqlite3.sqlite_version_info < MIN_SQLITE_VERSION:
        wanted = ".".join(map(str, MIN_SQLITE_VERSION))
        raise ConfigError(f"SQLite store {path}: needs SQLite {wanted}+, this Python has "
                          f"{sqlite3.sqlite_version}")
    _check_path(path)
    try:
        _create_private(path)
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                               check_same_thread=False)
    except (sqlite3.Error, OSError) as exc:
        raise ConfigError(f"SQLite store {path}: cannot open the file ({exc})") from exc
    try:
        retry_when_busy(lambda: _configure(conn, path))
        retry_when_busy(lambda: _ensure_schema(conn, path, pool, clocks))
    except sqlite3.Error as exc:
        conn.close()
        raise _open_error(path, exc) from exc
    except BaseException:
        conn.close()
        raise
    return conn, path


def _create_private(path: Path) -> None:
    """Create the file, if it is new, readable and writable by its owner only: it holds
    every job's payload and result.  SQLite gives the -wal and -shm files it creates
    later the mode of the database file.  An existing file keeps the mode it has."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def _check_path(path: Path) -> None:
    where = f"SQLite store {path}"
    if not path.parent.is_dir():
        raise ConfigError(f"{where}: directory {path.parent} does not exist")
    if path.is_dir():
        raise ConfigError(f"{where}: is a directory, not a file")
    if path.exists():
        mode = stat.S_IMODE(path.stat().st_mode)
        if not os.access(path, os.R_OK):
            raise ConfigError(f"{where}: the file is not readable")
        # Root may write a 0444 file anyway; a file nobody may write is still a sign that
        # it must not change, so it is refused for root too.
        if not os.access(path, os.W_OK) or not mode & 0o222:
            raise ConfigError(f"{where}: the file is read-only (mode {mode:04o})")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{where}: directory {path.parent} is not writable (SQLite keeps "
                          "its -wal and -shm files beside the database)")


def _configure(conn: sqlite3.Connection, path: Path) -> None:
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise ConfigError(f"SQLite store {path}: cannot switch to WAL mode (stays {mode})")
    # NORMAL in WAL mode: a commit survives a crash of any process (it is in the WAL
    # file in the OS cache); only a power loss or OS crash may drop the last commits
    # before a checkpoint fsyncs them.  FULL would fsync every commit, ~10x slower.
    conn.execute("PRAGMA synchronous = NORMAL")


def _ensure_schema(conn: sqlite3.Connection, path: Path, pool: str, clocks: Clocks) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise ConfigError(
                f"SQLite store {path} was written by a newer poolsup (schema {version}; "
                f"this one knows schema {SCHEMA_VERSION}): upgrade poolsup")
        if version == 0:
            if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
                raise ConfigError(f"SQLite store {path}: not a poolsup store (it holds "
                                  "other tables and no poolsup schema version)")
            for statement in schema_statements():
                conn.execute(statement)
        else:
            if version < 2:
                _migrate_1_to_2(conn, *clocks())
            if version < 3:
                _migrate_2_to_3(conn)
            if version < 4:
                _migrate_3_to_4(conn)
            if version < 5:
                _migrate_4_to_5(conn)
            if version < 6:
                _migrate_5_to_6(conn)
            if version < 7:
                _migrate_6_to_7(conn)
            if version < 8:
                _migrate_7_to_8(conn)
            if version < 9:
                _migrate_8_to_9(conn)
            if version < 10:
                _migrate_9_to_10(conn)
            if version < 11:
                _migrate_10_to_11(conn)
            if version < 12:
                _migrate_11_to_12(conn)
            if version < 13:
                _migrate_12_to_13(conn)
            if version < 14:
                _migrate_13_to_14(conn)
            if version < 15:
                _migrate_14_to_15(conn)
        if version != SCHEMA_VERSION:
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        _check_boot(conn, path, boot_id(), machine_id())
        conn.execute(load_queries()["ensure_counters"], {"pool": pool})
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _migrate_1_to_2(conn: sqlite3.Connection, wall: float, boot: float) -> None:
    """Schema 2: per-handler queue index, the host and health tables, and lease
    deadlines and last_seen times moved from the wall clock to the boot clock."""
    conn.execute("CREATE INDEX jobs_queue_by_handler ON jobs (pool, handler, due) "
                 "WHERE state = 'pending'")
    conn.execute("CREATE TABLE host (id INTEGER PRIMARY KEY CHECK (id = 1), "
                 "boot_id TEXT NOT NULL) STRICT")
    conn.execute("CREATE TABLE health (pool TEXT PRIMARY KEY, last_ok REAL NOT NULL, "
                 "ok_since REAL NOT NULL) STRICT")
    conn.execute("INSERT INTO host (id, boot_id) VALUES (1, ?)", (boot_id() or "",))
    shift = {"shift": boot - wall}
    conn.execute("UPDATE jobs SET lease_deadline = lease_deadline + :shift "
                 "WHERE lease_deadline IS NOT NULL", shift)
    conn.execute("UPDATE supervisors SET last_seen = last_seen + :shift", shift)


def _migrate_2_to_3(conn: sqlite3.Connection) -> None:
    """Schema 3: each job's checkpoint and when it was saved."""
    conn.execute("ALTER TABLE jobs ADD COLUMN checkpoint BLOB")
    conn.execute("ALTER TABLE jobs ADD COLUMN checkpoint_at REAL")


def _migrate_3_to_4(conn: sqlite3.Connection) -> None:
    """Schema 4: moves, pending jobs reserved for one supervisor for a while."""
    conn.execute("ALTER TABLE jobs ADD COLUMN reserved_for TEXT")
    conn.execute("ALTER TABLE jobs ADD COLUMN reserved_until REAL")
    conn.execute("ALTER TABLE jobs ADD COLUMN moved_from TEXT")
    conn.execute("CREATE INDEX jobs_reserved ON jobs (pool, reserved_for, reserved_until) "
                 "WHERE state = 'pending' AND reserved_for IS NOT NULL")


def _migrate_4_to_5(conn: sqlite3.Connection) -> None:
    """Schema 5: delayed jobs (run_at) and schedules (the jobs' schedule, the ticks)."""
    conn.execute("ALTER TABLE jobs ADD COLUMN run_at REAL")
    conn.execute("ALTER TABLE jobs ADD COLUMN schedule TEXT")
    conn.execute("CREATE INDEX jobs_by_schedule ON jobs (pool, schedule, key) "
                 "WHERE schedule IS NOT NULL AND state IN ('pending', 'running')")
    conn.execute("CREATE TABLE schedules (pool TEXT NOT NULL, name TEXT NOT NULL, "
                 "last_tick REAL NOT NULL, fingerprint TEXT NOT NULL, "
                 "fired_by TEXT NOT NULL, fired_at REAL NOT NULL, outcome TEXT NOT NULL, "
                 "detail TEXT, fires INTEGER NOT NULL DEFAULT 0, "
                 "skipped INTEGER NOT NULL DEFAULT 0, missed INTEGER NOT NULL DEFAULT 0, "
                 "PRIMARY KEY (pool, name)) STRICT")


def _migrate_5_to_6(conn: sqlite3.Connection) -> None:
    """Schema 6: the deadline of the lease whose expiry put a job back to pending."""
    conn.execute("ALTER TABLE jobs ADD COLUMN lease_expired_at REAL")


def _migrate_6_to_7(conn: sqlite3.Connection) -> None:
    """Schema 7: the machines that used the file during the boot it counts on.  None is
    known yet: the next boot id that differs is taken for a reboot, as before."""
    conn.execute("CREATE TABLE host_machines (machine_id TEXT PRIMARY KEY) STRICT")


def _migrate_7_to_8(conn: sqlite3.Connection) -> None:
    """Schema 8: the last gap between the pool's claims."""
    conn.execute("CREATE TABLE claim_gaps (pool TEXT PRIMARY KEY, last_claim REAL NOT NULL, "
                 "gap_start REAL, gap_end REAL) STRICT")


def _migrate_8_to_9(conn: sqlite3.Connection) -> None:
    """Schema 9: priorities and dispatch groups, pauses, max_pending, rate limits."""
    conn.execute("ALTER TABLE jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0")
    conn.execute("ALTER TABLE jobs ADD COLUMN job_group TEXT")
    conn.execute("DROP INDEX jobs_queue_by_handler")
    conn.execute("CREATE INDEX jobs_queue_by_priority ON jobs (pool, handler, priority, due) "
                 "WHERE state = 'pending'")
    conn.execute("CREATE TABLE paused (pool TEXT NOT NULL, name TEXT NOT NULL, "
                 "since REAL NOT NULL, PRIMARY KEY (pool, name)) STRICT")
    conn.execute("CREATE TABLE pool_settings (pool TEXT PRIMARY KEY, max_pending INTEGER) "
                 "STRICT")
    conn.execute("CREATE TABLE starts (pool TEXT NOT NULL, handler TEXT NOT NULL, "
                 "at REAL NOT NULL) STRICT")
    conn.execute("CREATE INDEX starts_by_handler ON starts (pool, handler, at)")


def _migrate_9_to_10(conn: sqlite3.Connection) -> None:
    """Schema 10: each job's history.  The jobs already there start with none."""
    conn.execute("CREATE TABLE job_events (id INTEGER PRIMARY KEY, pool TEXT NOT NULL, "
                 "key TEXT NOT NULL, at REAL NOT NULL, event TEXT NOT NULL, "
                 "supervisor TEXT, token INTEGER, detail TEXT) STRICT")
    conn.execute("CREATE INDEX job_events_by_job ON job_events (pool, key, id)")
    conn.execute("CREATE TRIGGER job_events_go_with_the_job AFTER DELETE ON jobs BEGIN "
                 "DELETE FROM job_events WHERE pool = old.pool AND key = old.key; END")


def _migrate_10_to_11(conn: sqlite3.Connection) -> None:
    """Schema 11: the answers to `poolsup debug` requests."""
    conn.execute("CREATE TABLE stacks_answers (pool TEXT NOT NULL, request TEXT NOT NULL, "
                 "answer BLOB NOT NULL, at REAL NOT NULL, PRIMARY KEY (pool, request)) STRICT")


def _migrate_11_to_12(conn: sqlite3.Connection) -> None:
    """Schema 12: each run's output (`poolsup logs`).  The jobs already there have none."""
    conn.execute("CREATE TABLE output_runs (pool TEXT NOT NULL, key TEXT NOT NULL, "
                 "token INTEGER NOT NULL, attempt INTEGER NOT NULL, supervisor TEXT NOT NULL, "
                 "max_bytes INTEGER NOT NULL, total INTEGER NOT NULL, "
                 "ended INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (pool, key, token)) STRICT")
    conn.execute("CREATE TABLE output_chunks (pool TEXT NOT NULL, key TEXT NOT NULL, "
                 "token INTEGER NOT NULL, at INTEGER NOT NULL, data BLOB NOT NULL, "
                 "PRIMARY KEY (pool, key, token, at)) STRICT")
    conn.execute("CREATE TRIGGER output_goes_with_the_job AFTER DELETE ON jobs BEGIN "
                 "DELETE FROM output_runs WHERE pool = old.pool AND key = old.key; "
                 "DELETE FROM output_chunks WHERE pool = old.pool AND key = old.key; END")


def _migrate_12_to_13(conn: sqlite3.Connection) -> None:
    """Schema 13: each job's count of snoozes (`sandbox.Snooze`); 0 for the jobs there."""
    conn.execute("ALTER TABLE jobs ADD COLUMN snoozes INTEGER NOT NULL DEFAULT 0")


def _migrate_13_to_14(conn: sqlite3.Connection) -> None:
    """Schema 14: schedules that their producer ended (when, and by which tick)."""
    conn.execute("ALTER TABLE schedules ADD COLUMN ended_at REAL")
    conn.execute("ALTER TABLE schedules ADD COLUMN ended_tick REAL")


def _migrate_14_to_15(conn: sqlite3.Connection) -> None:
    """Schema 15: the W3C trace context a job's dispatch kept.  The jobs already there
    have none."""
    conn.execute("ALTER TABLE jobs ADD COLUMN traceparent TEXT")
    conn.execute("ALTER TABLE jobs ADD COLUMN tracestate TEXT")


def _check_boot(conn: sqlite3.Connection, path: Path, boot: str | None,
                machine: str | None) -> None:
    row = conn.execute("SELECT boot_id FROM host").fetchone()
    if row is None:
        conn.execute("INSERT INTO host (id, boot_id) VALUES (1, '')")
    file_boot = row[0] if row is not None and row[0] else None
    machines = {found for (found,) in conn.execute("SELECT machine_id FROM host_machines")}
    verdict = check_boot(file_boot, machines, boot, machine)
    if verdict is BootCheck.OTHER_HOST:
        raise ConfigError(
            f"SQLite store {path}: used by another host (boot {file_boot} of machine "
            f"{', '.join(sorted(machines))}; this is machine {machine}): a SQLite store "
            "serves one host, share a pool between hosts through Redis (if this is this host "
            f"with a new machine id: sqlite3 {path} 'DELETE FROM host_machines')")
    if verdict is BootCheck.REBOOTED:
        # Boot-clock times of another boot: every lease is over, every supervisor gone.
        conn.execute("UPDATE jobs SET lease_deadline = 0 WHERE state = 'running'")
        conn.execute("DELETE FROM supervisors")
        conn.execute("DELETE FROM host_machines")
        conn.execute("DELETE FROM claim_gaps")
    if verdict in (BootCheck.FIRST, BootCheck.REBOOTED):
        conn.execute("UPDATE host SET boot_id = ?", (boot,))
    if verdict is not BootCheck.UNKNOWN and machine is not None:
        conn.execute("INSERT OR IGNORE INTO host_machines (machine_id) VALUES (?)", (machine,))


def _open_error(path: Path, exc: sqlite3.Error) -> Exception:
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    where = f"SQLite store {path}"
    if code in _UNAVAILABLE_CODES:
        return StoreUnavailable(f"{where}: {exc}")
    if code in (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT):
        return ConfigError(f"{where}: not a SQLite database, or corrupt ({exc})")
    if code == sqlite3.SQLITE_READONLY:
        return ConfigError(f"{where}: the file is read-only ({exc})")
    return ConfigError(f"{where}: cannot use the file ({exc})")
