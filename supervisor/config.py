"""pool.toml, parsed and validated once into frozen values; nothing else sees the raw TOML."""

from __future__ import annotations

import json
import os
import re
import socket
import zoneinfo
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from supervisor.cadence import cadence_of, cron_problem
from supervisor.core.limits import Limits, Rate
from supervisor.core.ticks import Cadence
from supervisor.errors import ConfigError
from supervisor.handler_source import defined_as
from supervisor.redaction import redact_url
from supervisor.sandbox_config import SandboxConfig, protected_paths, read_sandbox
from supervisor.sizes import describe
from supervisor.sizes import parse_duration as parse_duration
from supervisor.sizes import parse_size as parse_size
from supervisor.toml_tables import NAME, TomlDocument, TomlTable, is_identifier

_D = TypeVar("_D")
_STORE_SCHEMES = ("redis", "rediss", "redis+cluster", "rediss+cluster", "redis+sentinel",
                  "rediss+sentinel", "unix", "sqlite", "postgresql", "postgres")
_CRON_FIELD = re.compile(r"[0-9A-Za-z*/,-]+")


@dataclass(frozen=True, kw_only=True)
class HandlerConfig:
    name: str
    path: Path  # absolute
    function: str = "run"
    timeout: float = 300.0  # wall-clock seconds per attempt; 0 = no limit
    max_attempts: int = 3
    memory_limit: int | None = None  # bytes, for the job's whole process tree
    rebalance: bool  # the loader defaults it to `timeout == 0`
    cpu_limit: float | None = None  # CPU seconds per attempt
    nice: int | None = None
    cwd: Path | None = None  # absolute
    env: dict[str, str] = field(default_factory=dict)
    inherit_env: bool = False
    user: str | None = None
    group: str | None = None
    # Jobs one child may run one after another (1: a fresh process per job).
    max_jobs_per_child: int = 1
    # Jobs of an async handler one child runs at once, as asyncio tasks (1: one at a time).
    child_concurrency: int = 1
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    # What its sandbox hides besides `sandbox.hidden`: the config file and SQLite store.
    protected: tuple[Path, ...] = ()
    # Pool-wide, enforced by the store at claim time (core/limits.py).
    limits: Limits = field(default_factory=Limits)


@dataclass(frozen=True, kw_only=True)
class PoolConfig:
    name: str
    store: str
    retention: float = 86400.0
    max_payload: int = 1048576
    max_result: int = 1048576  # bytes of a handler's JSON result; larger fails the attempt
    max_pending: int | None = None  # dispatch refused while this many jobs are pending
    max_log: int = 1048576  # bytes of each run's output kept in the store; 0: none
    # Redis: a dispatch returns, and a claimed job starts, once this many replicas hold it.
    wait_replicas: int = 0


@dataclass(frozen=True, kw_only=True)
class SupervisorConfig:
    id: str
    capacity: int = 4
    lease_ttl: float = 10.0
    drain_timeout: float = 30.0
    stop_grace: float = 10.0


@dataclass(frozen=True, kw_only=True)
class ScheduleConfig:
    name: str
    every: float | None = None
    cron: str | None = None
    timezone: str = "UTC"
    handler: str | None = None
    jitter: float = 0.0  # each tick fires up to this many seconds late, alike everywhere
    key: str
    payload: Any = None
    producer: str | None = None  # "/absolute/path/file.py:function" once loaded
    timeout: float = 60.0  # seconds a producer may run; killed past it, the tick's plan fails

    @property
    def cadence(self) -> Cadence:
        return cadence_of(every=self.every, cron=self.cron, timezone=self.timezone)

    @property
    def settings(self) -> dict[str, object]:
        """What decides the schedule's ticks and what they do (for its fingerprint)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def producer_path(self) -> Path | None:
        return None if self.producer is None else Path(self.producer.rpartition(":")[0])

    @property
    def producer_function(self) -> str | None:
        return None if self.producer is None else self.producer.rpartition(":")[2]


@dataclass(frozen=True, kw_only=True)
class MetricsConfig:
    host: str
    port: int


@dataclass(frozen=True, kw_only=True)
class Config:
    path: Path
    pool: PoolConfig
    supervisor: SupervisorConfig
    handlers: Mapping[str, HandlerConfig]
    schedules: Mapping[str, ScheduleConfig]
    metrics: MetricsConfig | None = None


def resolve_config_path(option: str | None, environ: Mapping[str, str] = os.environ) -> Path:
    """The --config value, else $POOLSUP_CONFIG, else ./pool.toml (empty counts as unset)."""
    return Path(option or environ.get("POOLSUP_CONFIG") or "pool.toml")


def load_config(
    path: Path, *, environ: Mapping[str, str] = os.environ, require_handlers: bool = False
) -> Config:
    doc = TomlDocument.read(path)
    absolute = Path(os.path.abspath(path))
    base = absolute.parent
    root = TomlTable(doc, (), doc.data)
    root.only("pool", "supervisor", "handlers", "schedules", "metrics")
    pool = _read_pool(root.table("pool", required=True), base, environ)
    supervisor = _read_supervisor(root.table("supervisor"))
    handlers_table = root.table("handlers")
    handlers = {
        name: _read_handler(
            handlers_table.table(handlers_table.table_name(name, "handler")), base,
            protected_paths(absolute, pool.store),
        )
        for name in handlers_table.data
    }
    if require_handlers and not handlers:
        raise ConfigError(f"{doc.name}: run and check need at least one handler in [handlers]")
    schedules_table = root.table("schedules")
    schedules = {
        name: _read_schedule(
            schedules_table.table(schedules_table.table_name(name, "schedule")), base, handlers
        )
        for name in schedules_table.data
    }
    return Config(
        path=absolute,
        pool=pool,
        supervisor=supervisor,
        handlers=MappingProxyType(handlers),
        schedules=MappingProxyType(schedules),
        metrics=_read_metrics(root.table("metrics")) if "metrics" in doc.data else None,
    )


def _check_store_url(url: str, where: str) -> str:
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme not in _STORE_SCHEMES:
        raise ConfigError(
            f"{where} must be a redis://, rediss://, redis+cluster://, rediss+cluster://, "
            "redis+sentinel://, rediss+sentinel://, "
            "unix://, postgresql://, postgres:// or sqlite:// URL"
            f" (got {describe(redact_url(url))})"
        )
    if scheme == "sqlite" and not url.partition("://")[2].strip("/"):
        raise ConfigError(f"{where} needs a database file, like sqlite:////var/lib/pool.db")
    return url


def _read_pool(t: TomlTable, base: Path, environ: Mapping[str, str]) -> PoolConfig:
    t.only(*_keys(PoolConfig))
    store = t.string("store", None)
    if store is not None:
        _check_store_url(store, t.where("store"))
    if env_store := environ.get("POOLSUP_STORE"):
        store = _check_store_url(env_store, "POOLSUP_STORE")
    name = t.string("name", None) or t.missing("name")
    if not NAME.fullmatch(name):
        raise t.fail("name", f"must be 1-64 of A-Z a-z 0-9 _ . - (got {describe(name)})")
    store = store or f"sqlite:///{base / 'poolsup.db'}"
    wait_replicas = t.integer("wait_replicas", 0, low=0)
    if wait_replicas and store.lower().startswith("sqlite:"):
        raise t.fail("wait_replicas", "is for Redis stores: SQLite has no replicas "
                     "(leave it 0)")
    if wait_replicas and store.lower().startswith(("postgresql:", "postgres:")):
        raise t.fail("wait_replicas", "is for Redis stores: on PostgreSQL, use its own "
                     "synchronous_standby_names (leave it 0)")
    return PoolConfig(
        name=name,
        store=store,
        wait_replicas=wait_replicas,
        retention=t.seconds("retention", 86400.0, low=0, above=True),
        max_payload=t.size("max_payload", 1048576),
        max_result=t.size("max_result", 1048576),
        max_pending=t.integer("max_pending", None, low=1),
        max_log=t.size("max_log", 1048576, zero=True),
    )


def _read_supervisor(t: TomlTable) -> SupervisorConfig:
    t.only(*_keys(SupervisorConfig))
    ident = t.string("id", None)
    if ident is not None and not (
        len(ident) <= 128 and all(c.isprintable() and not c.isspace() for c in ident)
    ):
        raise t.fail(
            "id", f"must be 1-128 printable characters without spaces (got {describe(ident)})"
        )
    return SupervisorConfig(
        id=ident or socket.gethostname(),
        capacity=t.integer("capacity", 4, low=1, high=10000),
        lease_ttl=t.seconds("lease_ttl", 10.0, low=1),
        drain_timeout=t.seconds("drain_timeout", 30.0, low=0),
        stop_grace=t.seconds("stop_grace", 10.0, low=0),
    )


def _read_metrics(t: TomlTable) -> MetricsConfig:
    t.only("listen")
    listen = t.string("listen", None) or t.missing("listen")
    host, colon, port = listen.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise t.fail("listen", f'must be "host:port" (got {describe(listen)})')
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise t.fail(None, "needs prometheus-client: pip install 'poolsup[metrics]'") from None
    return MetricsConfig(host=host.strip("[]"), port=int(port))


def _read_handler(t: TomlTable, base: Path, protected: tuple[Path, ...]) -> HandlerConfig:
    t.only(*[key for key in _keys(HandlerConfig, skip="name")
             if key not in ("protected", "limits")],
           "max_running", "max_running_per_group", "rate_limit")
    timeout = t.seconds("timeout", 300.0, low=0)
    env = t.table("env")
    for name, value in env.data.items():
        if not name or "=" in name or "\0" in name:
            raise env.fail(name, "is not a valid environment variable name")
        if not isinstance(value, str) or "\0" in value:
            raise env.fail(name, f"must be a string (got {describe(value)})")
    path = t.location("path", base, directory=False) or t.missing("path")
    function = t.identifier("function", "run")
    max_jobs_per_child = t.integer("max_jobs_per_child", 1, low=1)
    return HandlerConfig(
        name=t.path[-1],
        path=path,
        function=function,
        timeout=timeout,
        max_attempts=t.integer("max_attempts", 3, low=1),
        memory_limit=t.size("memory_limit", None),
        rebalance=t.flag("rebalance", timeout == 0),
        cpu_limit=t.seconds("cpu_limit", None, low=0, above=True),
        nice=t.integer("nice", None, low=-20, high=19),
        cwd=t.location("cwd", base, directory=True),
        env=dict(env.data),
        inherit_env=t.flag("inherit_env", False),
        user=t.string("user", None),
        group=t.string("group", None),
        max_jobs_per_child=max_jobs_per_child,
        child_concurrency=_child_concurrency(t, path, function, max_jobs_per_child),
        sandbox=read_sandbox(t, base),
        limits=_read_limits(t),
        protected=protected,
    )


def _child_concurrency(t: TomlTable, path: Path, function: str, max_jobs_per_child: int
                       ) -> int:
    """`child_concurrency`, for an `async def` handler only: its jobs share a child as
    asyncio tasks, and a sync one would run them one at a time while holding them all.
    Told from the handler file's source (`core.validation.defined_as`), without running
    it; a function the file makes some other way is checked when the fork server loads
    it."""
    concurrency = t.integer("child_concurrency", 1, low=1, high=10000)
    if concurrency == 1:
        return 1
    if max_jobs_per_child > 1:
        raise t.fail("child_concurrency", "cannot be above 1 with max_jobs_per_child above 1 "
                     "(a shared child runs its jobs at once, not one after another)")
    try:
        source = path.read_bytes()
    except OSError:
        return concurrency  # the fork server says why it cannot load it
    if defined_as(source, function) == "def":
        raise t.fail("child_concurrency", f"needs an async handler: {function} in {path} is "
                     "a plain def (make it `async def`, or set child_concurrency = 1)")
    return concurrency


def _read_limits(t: TomlTable) -> Limits:
    rate = t.string("rate_limit", None)
    try:
        parsed = None if rate is None else Rate.parse(rate)
    except ConfigError:
        raise t.fail("rate_limit", 'must be "N/s", "N/m" or "N/h" with N a whole number '
                     f"above 0 (got {describe(rate)})") from None
    return Limits(max_running=t.integer("max_running", None, low=1),
                  max_running_per_group=t.integer("max_running_per_group", None, low=1),
                  rate=parsed)


def _read_schedule(
    t: TomlTable, base: Path, handlers: Mapping[str, HandlerConfig]
) -> ScheduleConfig:
    t.only(*_keys(ScheduleConfig, skip="name"))
    every = t.seconds("every", None, low=0, above=True)
    cron = t.string("cron", None)
    if (every is None) == (cron is None):
        raise t.fail(None, "needs exactly one of every or cron")
    if cron is not None:
        if not _is_cron(cron):
            raise t.fail(
                "cron", f"must be 5 fields: minute hour day month weekday (got {describe(cron)})"
            )
        if problem := cron_problem(cron):
            raise t.fail("cron", f"{problem.lower()} in {describe(cron)}")
    timezone = t.string("timezone", "UTC")
    if not _is_timezone(timezone):
        raise t.fail("timezone", f"is not a known time zone (got {describe(timezone)})")
    jitter = t.seconds("jitter", 0.0, low=0)
    if every is not None and jitter >= every:
        raise t.fail("jitter", f"must be below every ({every:g} s), got {jitter:g}")
    timeout = t.seconds("timeout", 60.0, low=0, above=True)
    producer = t.string("producer", None)
    if producer is not None:
        producer = _resolve_producer(t, base, producer)
    handler = t.string("handler", None)
    if handler is None and producer is None:
        raise t.fail(None, "needs a handler (or a producer)")
    if handler is not None and producer is not None:
        raise t.fail(None, "needs a handler or a producer, not both")
    if handler is not None and handler not in handlers:
        known = ", ".join(handlers) or "none"
        raise t.fail("handler", f"{describe(handler)} is not in [handlers] (configured: {known})")
    key = t.string("key", t.path[-1])
    if len(key) > 256 or not key.isprintable():
        raise t.fail("key", f"must be 1-256 printable characters (got {describe(key)})")
    payload = t.data.get("payload")
    try:
        json.dumps(payload, allow_nan=False)
    except (TypeError, ValueError):
        raise t.fail("payload", "must be JSON: no dates, times, nan or inf") from None
    return ScheduleConfig(
        name=t.path[-1],
        every=every,
        cron=cron,
        timezone=timezone,
        jitter=jitter,
        timeout=timeout,
        handler=handler,
        key=key,
        payload=payload,
        producer=producer,
    )


def _is_cron(expression: str) -> bool:
    parts = expression.split()
    return len(parts) == 5 and all(_CRON_FIELD.fullmatch(part) for part in parts)


def _is_timezone(name: str) -> bool:
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True


def _resolve_producer(t: TomlTable, base: Path, producer: str) -> str:
    file, _, function = producer.rpartition(":")
    if not file or not is_identifier(function):
        raise t.fail("producer", f'must be "path/to/file.py:function" (got {describe(producer)})')
    resolved = Path(os.path.abspath(base / file))
    if not resolved.is_file():
        raise t.fail("producer", f"file {describe(file)} does not exist")
    return f"{resolved}:{function}"


def _keys(cls: type, *, skip: str = "") -> list[str]:
    return [f.name for f in fields(cls) if f.name != skip]
