"""The SQL statements both engines run as they are: sql/queries.sql, one per named
section (`-- name: NAME`), written once with `:name` parameters and the tables in the
schema `poolsup`.  Each engine's loader prints them in its own dialect (`for_sqlite`:
no schema, `for_postgres`: psycopg's `%(name)s`) and adds the statements of its own
sql/queries.sql, those that differ between the engines (SQL functions, locking clauses,
index hints, JSON or array parameters).  A name is in one file only.

Parameters every statement may use, bound by each engine's Tx: :pool, :now (the store's
clock for users), :lease_now (the clock leases count on: SQLite's CLOCK_BOOTTIME, the
PostgreSQL server's clock).
"""

from __future__ import annotations

import functools
import re
from importlib import resources

NAME_MARKER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
_COMMENT = re.compile(r"^\s*--.*$\n?", re.MULTILINE)
_PARAMETER = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
_SCHEMA = re.compile(r"\bpoolsup\.")


def sections(text: str) -> dict[str, str]:
    """The named sections of a queries.sql file, each with its comments."""
    parts = NAME_MARKER.split(text)
    # parts = [preamble, name1, body1, name2, body2, ...]
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


@functools.cache
def shared() -> dict[str, str]:
    """sql/queries.sql's statements, their comments left out."""
    text = resources.files("supervisor.store.sql").joinpath("queries.sql").read_text("utf-8")
    return {name: _COMMENT.sub("", body).strip() for name, body in sections(text).items()}


def for_sqlite(statement: str) -> str:
    return _SCHEMA.sub("", statement)


def for_postgres(statement: str) -> str:
    return _PARAMETER.sub(r"%(\1)s", statement.replace("%", "%%"))


def merged(own: dict[str, str], shared: dict[str, str]) -> dict[str, str]:
    """An engine's statements: its own and the shared ones, no name in both."""
    both = own.keys() & shared.keys()
    assert not both, f"in the engine's queries.sql and in store/sql/queries.sql: {sorted(both)}"
    return {**shared, **own}
