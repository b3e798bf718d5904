"""The decision core does no I/O and reads no clock: check its imports."""

import ast
from pathlib import Path

import supervisor.core

FORBIDDEN = {"anyio", "asyncio", "redis", "sqlite3", "os", "time", "random", "socket", "psutil",
             "subprocess", "trio", "datetime"}


def test_core_modules_import_nothing_with_side_effects() -> None:
    core_dir = Path(supervisor.core.__file__).parent
    for path in core_dir.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN, f"{path.name} imports {name}"
