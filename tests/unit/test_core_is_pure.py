"""The decision core does no I/O and reads no clock: check its imports, by full name.

Core may import only the modules below and its own (`supervisor.core.*`); a module not
listed is refused, so that a new import is a decision someone makes here, not a slip
(`from supervisor.store import ...` would bring Redis and SQLite in; `from supervisor
import daemon` the whole service).  `supervisor.errors` is allowed because it holds
plain exception classes only, which `test_allowed_poolsup_modules_import_only_pure_ones`
keeps true.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import supervisor
import supervisor.core

PURE_STDLIB = frozenset({
    "__future__", "abc", "bisect", "collections", "collections.abc", "dataclasses", "enum",
    "fractions", "functools", "hashlib", "heapq", "itertools", "math", "operator", "re",
    "typing",
})
PURE_THIRD_PARTY = frozenset({"orjson"})  # encoding only
PURE_POOLSUP = frozenset({"supervisor.errors"})
CORE = "supervisor.core"
ALLOWED = PURE_STDLIB | PURE_THIRD_PARTY | PURE_POOLSUP


def allowed(name: str) -> bool:
    return name in ALLOWED or name == CORE or name.startswith(CORE + ".")


def imported_names(path: Path, package: str) -> Iterator[str]:
    """Every module `path` imports, by full name: `from a.b import c` yields `a.b`, or
    `a.b.c` where `a.b` alone is not allowed (c may be a module of package a.b)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = parts[: len(parts) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            if allowed(module):
                yield module
            else:
                yield from (f"{module}.{alias.name}" for alias in node.names)


def problems(files: list[Path], package: str) -> list[str]:
    return [f"{path.name} imports {name}" for path in files
            for name in imported_names(path, package) if not allowed(name)]


def test_core_modules_import_only_pure_modules() -> None:
    core_dir = Path(supervisor.core.__file__).parent
    assert problems(sorted(core_dir.glob("*.py")), CORE) == []


def test_allowed_poolsup_modules_import_only_pure_ones() -> None:
    root = Path(supervisor.__file__).parent
    files = [root / f"{name.removeprefix('supervisor.').replace('.', '/')}.py"
             for name in PURE_POOLSUP]
    assert problems(files, "supervisor") == []


@pytest.mark.parametrize(
    "line",
    [
        "from supervisor.store import open_store",
        "from supervisor.store.redis.store import RedisStore",
        "from supervisor import daemon",
        "from .. import store",
        "import os.path",
        "import supervisor.store.sqlite.db",
        "from time import monotonic",
    ],
)
def test_an_impure_import_is_refused(tmp_path: Path, line: str) -> None:
    module = tmp_path / "decision.py"
    module.write_text(f"from __future__ import annotations\n\n\ndef f() -> None:\n    {line}\n")
    assert problems([module], CORE) != []


def test_pure_imports_are_taken(tmp_path: Path) -> None:
    module = tmp_path / "decision.py"
    module.write_text("from . import leases\nfrom .leases import fence_margin\n"
                      "from supervisor import errors\nfrom supervisor.errors import InvalidJob\n"
                      "import enum\nfrom collections.abc import Mapping\n")
    assert problems([module], CORE) == []
