"""Load a handler function from a file path (not an import name)."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import sys
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from sandbox.policy import SandboxSpec


@dataclass(frozen=True, kw_only=True)
class HandlerSpec:
    """A handler as the fork server is told about it: where it is and how it runs."""

    path: str
    function: str = "run"
    memory_limit: int | None = None  # bytes, the job's whole process tree
    cpu_limit: float | None = None  # CPU seconds per attempt, the whole tree
    nice: int | None = None
    cwd: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    inherit_env: bool = False
    user: str | None = None
    group: str | None = None
    max_jobs_per_child: int = 1  # jobs one child runs one after another (sandbox.reuse)
    child_concurrency: int = 1  # an async handler's jobs one child runs at once (sandbox.shared)
    sandbox: SandboxSpec = field(default_factory=SandboxSpec)


def parse_handler_table(text: str) -> dict[str, HandlerSpec]:
    """`{"NAME": {"path": "/abs/file.py", "function": "run", ...}, ...}` as specs; every
    key but `path` may be left out."""
    table = orjson.loads(text)
    return {name: _spec(entry) for name, entry in table.items()}


def _spec(entry: dict[str, Any]) -> HandlerSpec:
    def optional(key: str, kind: Callable[[Any], Any]) -> Any:
        value = entry.get(key)
        return None if value is None else kind(value)

    return HandlerSpec(
        path=str(entry["path"]),
        function=str(entry.get("function") or "run"),
        memory_limit=optional("memory_limit", int),
        cpu_limit=optional("cpu_limit", float),
        nice=optional("nice", int),
        cwd=entry.get("cwd"),
        env={str(name): str(value) for name, value in (entry.get("env") or {}).items()},
        inherit_env=bool(entry.get("inherit_env", False)),
        user=entry.get("user"),
        group=entry.get("group"),
        max_jobs_per_child=max(1, int(entry.get("max_jobs_per_child") or 1)),
        child_concurrency=max(1, int(entry.get("child_concurrency") or 1)),
        sandbox=_sandbox(entry.get("sandbox") or {}),
    )


def _sandbox(entry: dict[str, Any]) -> SandboxSpec:
    network = entry.get("network", "all")
    return SandboxSpec(
        profile=str(entry.get("profile", "default")),
        writable=tuple(str(path) for path in entry.get("writable", ())),
        hidden=tuple(str(path) for path in entry.get("hidden", ())),
        network=network if isinstance(network, str) else tuple(int(p) for p in network),
    )


class HandlerLoadError(Exception):
    """The handler file imported, but does not provide the function."""


def module_name(handler: str) -> str:
    return "poolsup_handler_" + re.sub(r"\W", "_", handler)


def load_handler(handler: str, spec: HandlerSpec) -> Callable[..., Any]:
    """Import `spec.path` as module `poolsup_handler_<handler>`; return its function.

    The file's directory is appended to sys.path (appended, so that it cannot shadow
    installed modules) so that a handler can import modules that sit beside it, as it
    could when run as a script.
    """
    name = module_name(handler)
    path = os.path.abspath(spec.path)
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise HandlerLoadError(f"{path}: not a Python file")
    directory = os.path.dirname(path)
    if directory not in sys.path:
        sys.path.append(directory)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    function = getattr(module, spec.function, None)
    if not callable(function):
        raise HandlerLoadError(f"{path} has no function {spec.function!r}")
    return function  # type: ignore[no-any-return]


@dataclass(frozen=True, kw_only=True)
class LoadedHandler:
    """A handler as the fork server preloaded it: its function, or why it failed."""

    spec: HandlerSpec
    function: Callable[..., Any] | None
    error: str | None  # the import traceback


def preload(specs: dict[str, HandlerSpec]) -> dict[str, LoadedHandler]:
    handlers = {}
    for name, spec in specs.items():
        try:
            function = load_handler(name, spec)
        except BaseException:
            handlers[name] = LoadedHandler(spec=spec, function=None, error=traceback.format_exc())
        else:
            if spec.child_concurrency > 1 and not inspect.iscoroutinefunction(function):
                handlers[name] = LoadedHandler(spec=spec, function=None, error=(
                    f"child_concurrency = {spec.child_concurrency} needs an async handler: "
                    f"{spec.function} is not an async def\n"))
                continue
            handlers[name] = LoadedHandler(spec=spec, function=function, error=None)
            if inspect.iscoroutinefunction(function):
                importlib.import_module("asyncio")  # children then need not import it
            if spec.child_concurrency > 1:
                importlib.import_module("sandbox.shared")
    return handlers
