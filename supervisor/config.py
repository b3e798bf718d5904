"""pool.toml, parsed and validated once into frozen values; nothing else sees the raw TOML."""

from __future__ import annotations

import difflib
import json
import keyword
import os
import re
import socket
import tomllib
import zoneinfo
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, NoReturn, TypeVar

from supervisor.errors import ConfigError
from supervisor.sizes import describe
from supervisor.sizes import parse_duration as parse_duration
from supervisor.sizes import parse_size as parse_size

_D = TypeVar("_D")
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_STORE_SCHEMES = ("redis", "rediss", "unix", "sqlite")
_CRON_FIELD = re.compile(r"[0-9A-Za-z*/,-]+")
# A table header line; the anchors keep array lines such as `  [1, 2],` out.
_HEADER = re.compile(r"\s*\[\[?[^\[\]=]+\]\]?\s*(?:#.*)?$")


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


@dataclass(frozen=True, kw_only=True)
class PoolConfig:
    name: str
    store: str
    retention: float = 86400.0
    max_payload: int = 1048576


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
    key: str
    payload: Any = None
    producer: str | None = None  # "/absolute/path/file.py:function" once loaded

    @property
    def producer_path(self) -> Path | None:
        return None if self.producer is None else Path(self.producer.rpartition(":")[0])

    @property
    def producer_function(self) -> str | None:
        return None if self.producer is None else self.producer.rpartition(":")[2]


@dataclass(frozen=True, kw_only=True)
class Config:
    path: Path
    pool: PoolConfig
    supervisor: SupervisorConfig
    handlers: Mapping[str, HandlerConfig]
    schedules: Mapping[str, ScheduleConfig]


def resolve_config_path(option: str | None, environ: Mapping[str, str] = os.environ) -> Path:
    """The --config value, else $POOLSUP_CONFIG, else ./pool.toml (empty counts as unset)."""
    return Path(option or environ.get("POOLSUP_CONFIG") or "pool.toml")


def load_config(
    path: Path, *, environ: Mapping[str, str] = os.environ, require_handlers: bool = False
) -> Config:
    doc = _Document.read(path)
    absolute = Path(os.path.abspath(path))
    base = absolute.parent
    root = _Table(doc, (), doc.data)
    root.only("pool", "supervisor", "handlers", "schedules")
    pool = _read_pool(root.table("pool", required=True), base, environ)
    supervisor = _read_supervisor(root.table("supervisor"))
    handlers_table = root.table("handlers")
    handlers = {
        name: _read_handler(handlers_table.table(handlers_table.table_name(name, "handler")), base)
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
    )


def redact_url(url: str) -> str:
    """`url` with its password (in the user part or a password= parameter) shown as ***."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    cut = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    head, tail = rest[:cut], rest[cut:]
    userinfo, at, host = head.rpartition("@")
    if at and ":" in userinfo:
        head = f"{userinfo.partition(':')[0]}:***@{host}"
    tail = re.sub(r"([?&]password=)[^&#]*", r"\1***", tail)
    return f"{scheme}://{head}{tail}"


def _check_store_url(url: str, where: str) -> str:
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme not in _STORE_SCHEMES:
        raise ConfigError(
            f"{where} must be a redis://, rediss://, unix:// or sqlite:// URL"
            f" (got {describe(redact_url(url))})"
        )
    if scheme == "sqlite" and not url.partition("://")[2].strip("/"):
        raise ConfigError(f"{where} needs a database file, like sqlite:////var/lib/pool.db")
    return url


def _read_pool(t: _Table, base: Path, environ: Mapping[str, str]) -> PoolConfig:
    t.only(*_keys(PoolConfig))
    store = t.string("store", None)
    if store is not None:
        _check_store_url(store, t.where("store"))
    if env_store := environ.get("POOLSUP_STORE"):
        store = _check_store_url(env_store, "POOLSUP_STORE")
    name = t.string("name", None) or t.missing("name")
    if not _NAME.fullmatch(name):
        raise t.fail("name", f"must be 1-64 of A-Z a-z 0-9 _ . - (got {describe(name)})")
    return PoolConfig(
        name=name,
        store=store or f"sqlite:///{base / 'poolsup.db'}",
        retention=t.seconds("retention", 86400.0, low=0, above=True),
        max_payload=t.size("max_payload", 1048576),
    )


def _read_supervisor(t: _Table) -> SupervisorConfig:
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


def _read_handler(t: _Table, base: Path) -> HandlerConfig:
    t.only(*_keys(HandlerConfig, skip="name"))
    timeout = t.seconds("timeout", 300.0, low=0)
    env = t.table("env")
    for name, value in env.data.items():
        if not name or "=" in name or "\0" in name:
            raise env.fail(name, "is not a valid environment variable name")
        if not isinstance(value, str) or "\0" in value:
            raise env.fail(name, f"must be a string (got {describe(value)})")
    return HandlerConfig(
        name=t.path[-1],
        path=t.location("path", base, directory=False) or t.missing("path"),
        function=t.identifier("function", "run"),
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
    )


def _read_schedule(t: _Table, base: Path, handlers: Mapping[str, HandlerConfig]) -> ScheduleConfig:
    t.only(*_keys(ScheduleConfig, skip="name"))
    every = t.seconds("every", None, low=0, above=True)
    cron = t.string("cron", None)
    if (every is None) == (cron is None):
        raise t.fail(None, "needs exactly one of every or cron")
    if cron is not None and not _is_cron(cron):
        raise t.fail(
            "cron", f"must be 5 fields: minute hour day month weekday (got {describe(cron)})"
        )
    timezone = t.string("timezone", "UTC")
    if not _is_timezone(timezone):
        raise t.fail("timezone", f"is not a known time zone (got {describe(timezone)})")
    producer = t.string("producer", None)
    if producer is not None:
        producer = _resolve_producer(t, base, producer)
    handler = t.string("handler", None)
    if handler is None and producer is None:
        raise t.fail(None, "needs a handler (or a producer)")
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


def _resolve_producer(t: _Table, base: Path, producer: str) -> str:
    file, _, function = producer.rpartition(":")
    if not file or not _is_identifier(function):
        raise t.fail("producer", f'must be "path/to/file.py:function" (got {describe(producer)})')
    resolved = Path(os.path.abspath(base / file))
    if not resolved.is_file():
        raise t.fail("producer", f"file {describe(file)} does not exist")
    return f"{resolved}:{function}"


def _is_identifier(text: str) -> bool:
    return text.isidentifier() and not keyword.iskeyword(text)


def _keys(cls: type, *, skip: str = "") -> list[str]:
    return [f.name for f in fields(cls) if f.name != skip]


class _Document:
    """The text of the config file, kept to find line numbers that tomllib does not give."""

    def __init__(self, name: str, text: str, data: dict[str, Any]) -> None:
        self.name = name
        self.lines = text.splitlines()
        self.data = data

    @classmethod
    def read(cls, path: Path) -> _Document:
        name = str(path)
        try:
            text = path.read_bytes().decode("utf-8")
        except OSError as error:
            reason = f"[Errno {error.errno}] {error.strerror}" if error.errno else str(error)
            raise ConfigError(f"{name}: cannot read: {reason}") from None
        except UnicodeDecodeError as error:
            raise ConfigError(f"{name}: invalid TOML: not UTF-8 (byte {error.start})") from None
        try:
            return cls(name, text, tomllib.loads(text))
        except tomllib.TOMLDecodeError as error:
            message = " ".join(str(error).split())
            line = re.search(r"\(at line (\d+), column \d+\)", message)
            where = f"{name}:{line[1]}" if line else name
            raise ConfigError(f"{where}: invalid TOML: {message}") from None

    def line_of(self, path: tuple[str, ...]) -> int | None:
        """Best effort: the 1-based line of a table or key, found by scanning the text."""
        for split in range(len(path), -1, -1):
            start = self._header(path[:split])
            if start is None:
                continue
            if split == len(path):
                return start + 1 if split else None
            found = self._key(start, path[split:])
            if found is not None:
                return found + 1
        return None

    def _header(self, parts: tuple[str, ...]) -> int | None:
        if not parts:
            return -1
        pattern = re.compile(rf"\s*\[\[?\s*{_dotted(parts)}\s*\]")
        return next((i for i, line in enumerate(self.lines) if pattern.match(line)), None)

    def _key(self, start: int, parts: tuple[str, ...]) -> int | None:
        end = next(
            (i for i in range(start + 1, len(self.lines)) if _HEADER.match(self.lines[i])),
            len(self.lines),
        )
        # The whole dotted key first, then shorter prefixes (an inline table's line).
        for size in range(len(parts), 0, -1):
            pattern = re.compile(rf"\s*{_dotted(parts[:size])}\s*[=.]")
            for i in range(start + 1, end):
                if pattern.match(self.lines[i]):
                    return i
        return None


def _dotted(parts: tuple[str, ...]) -> str:
    quoted = (rf"""(?:{re.escape(p)}|"{re.escape(p)}"|'{re.escape(p)}')""" for p in parts)
    return r"\s*\.\s*".join(quoted)


class _Table:
    """One TOML table being read, with typed getters whose errors name the file and key."""

    def __init__(self, doc: _Document, path: tuple[str, ...], data: dict[str, Any]) -> None:
        self.doc = doc
        self.path = path
        self.data = data

    def where(self, key: str | None, *, show_key: bool = True) -> str:
        """`file:line: [table] key`, for the start of an error message."""
        line = self.doc.line_of(self.path if key is None else (*self.path, key))
        parts = [f"{self.doc.name}:{line}:" if line else f"{self.doc.name}:"]
        if self.path:
            parts.append(f"[{'.'.join(self.path)}]")
        if key is not None and show_key:
            parts.append(key)
        return " ".join(parts)

    def fail(self, key: str | None, problem: str, *, show_key: bool = True) -> ConfigError:
        return ConfigError(f"{self.where(key, show_key=show_key)} {problem}")

    def missing(self, key: str) -> NoReturn:
        raise self.fail(None, f"{key} is required")

    def only(self, *allowed: str) -> None:
        for key, value in self.data.items():
            if key in allowed:
                continue
            close = difflib.get_close_matches(key, allowed, n=1)
            hint = f' (did you mean "{close[0]}"?)' if close else ""
            if not self.path and isinstance(value, dict):
                raise self.fail(key, f"unknown table [{key}]{hint}", show_key=False)
            raise self.fail(key, f"unknown key {describe(key)}{hint}", show_key=False)

    def table_name(self, key: str, what: str) -> str:
        if not _NAME.fullmatch(key):
            problem = f"invalid {what} name {describe(key)}: use 1-64 of A-Z a-z 0-9 _ . -"
            raise self.fail(key, problem, show_key=False)
        return key

    def table(self, key: str, *, required: bool = False) -> _Table:
        value = self.data.get(key, None if required else {})
        child = _Table(self.doc, (*self.path, key), value if isinstance(value, dict) else {})
        if value is None:
            raise child.fail(None, "is required")
        if not isinstance(value, dict):
            raise child.fail(None, f"must be a table (got {describe(value)})")
        return child

    def string(self, key: str, default: _D) -> str | _D:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, str) or not value:
            raise self.fail(key, f"must be a non-empty string (got {describe(value)})")
        return value

    def identifier(self, key: str, default: str) -> str:
        value = self.string(key, default)
        if not _is_identifier(value):
            raise self.fail(key, f"must be a Python identifier (got {describe(value)})")
        return value

    def flag(self, key: str, default: _D) -> bool | _D:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(key, f"must be true or false (got {describe(value)})")
        return value

    def integer(self, key: str, default: _D, *, low: int, high: int | None = None) -> int | _D:
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"must be an integer (got {describe(value)})")
        return int(self._in_range(key, value, low=low, high=high))

    def seconds(self, key: str, default: _D, *, low: float, above: bool = False) -> float | _D:
        value = self.data.get(key)
        if value is None:
            return default
        seconds = parse_duration(value, where=self.where(key))
        return self._in_range(key, seconds, low=low, above=above)

    def size(self, key: str, default: _D) -> int | _D:
        value = self.data.get(key)
        if value is None:
            return default
        size = parse_size(value, where=self.where(key))
        return int(self._in_range(key, size, low=0, above=True))

    def location(self, key: str, base: Path, *, directory: bool) -> Path | None:
        value = self.string(key, None)
        if value is None:
            return None
        resolved = Path(os.path.abspath(base / value))
        if not resolved.exists():
            raise self.fail(key, f"{describe(value)} does not exist")
        if resolved.is_dir() != directory:
            raise self.fail(
                key, f"{describe(value)} is not a {'directory' if directory else 'file'}"
            )
        return resolved

    def _in_range(
        self, key: str, value: float, *, low: float, high: float | None = None, above: bool = False
    ) -> float:
        if above and value <= low:
            raise self.fail(key, f"must be greater than {low:g} (got {describe(value)})")
        if value < low:
            raise self.fail(key, f"must be at least {low:g} (got {describe(value)})")
        if high is not None and value > high:
            raise self.fail(key, f"must be at most {high:g} (got {describe(value)})")
        return value
