"""What a handler file's source says of its function, read without running the file."""

from __future__ import annotations

import ast
from typing import Literal


def defined_as(source: bytes, function: str) -> Literal["def", "async def"] | None:
    """How the file's top level last defines `function`: "def", "async def", or None when
    it does not with a def statement (an assignment, an import, a syntax error: then
    only loading it tells)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    found: Literal["def", "async def"] | None = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == function:
            found = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
        elif _assigns(node, function):
            found = None
    return found


def _assigns(node: ast.stmt, name: str) -> bool:
    names = [target for target in ast.walk(node) if isinstance(target, ast.Name)
             and isinstance(target.ctx, ast.Store)]
    aliases = [alias for alias in getattr(node, "names", []) if isinstance(alias, ast.alias)]
    return (any(target.id == name for target in names)
            or any((alias.asname or alias.name) == name for alias in aliases))
