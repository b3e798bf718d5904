"""Load a handler function from a file path (not an import name)."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson


@dataclass(frozen=True, kw_only=True)
class HandlerSpec:
    path: str
    function: str = "run"


def parse_handler_table(text: str) -> dict[str, HandlerSpec]:
    """`{"NAME": {"path": "/abs/file.py", "function": "run"}, ...}` as specs."""
    table = orjson.loads(text)
    return {
        name: HandlerSpec(path=entry["path"], function=entry.get("function", "run"))
        for name, entry in table.items()
    }


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
            handlers[name] = LoadedHandler(spec=spec, function=function, error=None)
    return handlers
