"""A handler's `sandbox` in pool.toml: a profile name, or a table (`profile`, `writable`,
`hidden`, `network`); and the paths every sandboxed job of a pool has hidden from it,
its config file and SQLite store (docs/sandbox.md)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sandbox.policy import PROFILES
from supervisor.sizes import describe
from supervisor.store.sqlite.schema import path_from_url
from supervisor.toml_tables import TomlTable

_NETWORK_WORDS = ("all", "none")
_STORE_SUFFIXES = ("", "-wal", "-shm", "-journal")


@dataclass(frozen=True, kw_only=True)
class SandboxConfig:
    profile: str = "default"
    writable: tuple[Path, ...] = ()  # absolute, existing
    hidden: tuple[Path, ...] = ()  # absolute
    network: str | tuple[int, ...] = "all"  # "all", "none" or TCP ports


def read_sandbox(t: TomlTable, base: Path) -> SandboxConfig:
    """`[handlers.X] sandbox`, in either form; relative paths are from `base`."""
    value = t.data.get("sandbox")
    if value is None:
        return SandboxConfig()
    if isinstance(value, str):
        return SandboxConfig(profile=_profile(t, "sandbox", value),
                             network="none" if value == "strict" else "all")
    if not isinstance(value, dict):
        raise t.fail("sandbox", f'must be "default", "strict", "off" or a table '
                                f"(got {describe(value)})")
    table = t.table("sandbox")
    table.only("profile", "writable", "hidden", "network")
    profile = _profile(table, "profile", table.data.get("profile", "default"))
    writable = _paths(table, "writable", base, existing=True)
    hidden = _paths(table, "hidden", base, existing=False)
    network = _network(table, "none" if profile == "strict" else "all")
    if profile != "strict" and writable:
        raise table.fail("writable", 'only means something with profile = "strict"')
    if profile == "off" and (hidden or network != "all"):
        key = "hidden" if hidden else "network"
        raise table.fail(key, 'means nothing with profile = "off"')
    return SandboxConfig(profile=profile, writable=writable, hidden=hidden, network=network)


def protected_paths(config_path: Path, store: str) -> tuple[Path, ...]:
    """What no sandboxed job may read or write: the config file, and the SQLite store's
    files (the database, its WAL, shared memory and journal)."""
    paths = [config_path]
    if store.partition("://")[0].lower() == "sqlite":
        database = str(path_from_url(store))
        paths += [Path(database + suffix) for suffix in _STORE_SUFFIXES]
    return tuple(paths)


def _profile(t: TomlTable, key: str, value: object) -> str:
    if value not in PROFILES:
        raise t.fail(key, f'must be "default", "strict" or "off" (got {describe(value)})')
    return str(value)


def _paths(t: TomlTable, key: str, base: Path, *, existing: bool) -> tuple[Path, ...]:
    value = t.data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise t.fail(key, f"must be a list of paths (got {describe(value)})")
    paths = tuple(Path(os.path.abspath(base / item)) for item in value)
    for item, path in zip(value, paths, strict=True):
        if existing and not path.exists():
            raise t.fail(key, f"{describe(item)} does not exist")
    return paths


def _network(t: TomlTable, default: str) -> str | tuple[int, ...]:
    value = t.data.get("network", default)
    if isinstance(value, str) and value in _NETWORK_WORDS:
        return value
    if isinstance(value, list) and all(
        isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536
        for port in value
    ):
        return tuple(sorted(set(value)))
    raise t.fail("network", 'must be "all", "none" or a list of TCP ports 1-65535 '
                            f"(got {describe(value)})")
