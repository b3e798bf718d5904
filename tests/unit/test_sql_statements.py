"""store/sql/statements.py: the statements both SQL stores share are printed in each
engine's dialect, and every statement a rule of store/sql/ names is there in both."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import supervisor.store.sql
from supervisor.store.postgres.schema import load_queries as postgres_queries
from supervisor.store.sql import statements
from supervisor.store.sqlite.schema import load_queries as sqlite_queries

NAMED = re.compile(r"\btx\.(?:run|rows|row|value)\(\s*\"(\w+)\"")


def test_a_shared_statement_in_each_dialect() -> None:
    shared = ("UPDATE poolsup.jobs SET at = :lease_now - :period WHERE pool = :pool "
              "AND x::text = '%'")
    assert statements.for_sqlite(shared) == (
        "UPDATE jobs SET at = :lease_now - :period WHERE pool = :pool AND x::text = '%'")
    assert statements.for_postgres(shared) == (
        "UPDATE poolsup.jobs SET at = %(lease_now)s - %(period)s WHERE pool = %(pool)s "
        "AND x::text = '%%'")


def test_a_name_is_in_one_file_only() -> None:
    with pytest.raises(AssertionError, match="ping"):
        statements.merged({"ping": "SELECT 2"}, {"ping": "SELECT 1"})


def test_the_shared_statements_leave_out_their_comments() -> None:
    assert all("--" not in body for body in statements.shared().values())
    assert sqlite_queries()["ping"] == "SELECT 1;"
    assert postgres_queries()["ping"] == "SELECT 1;"


def test_every_statement_a_rule_names_is_in_both_engines() -> None:
    folder = Path(supervisor.store.sql.__file__).parent
    named = {name for path in folder.glob("*.py") for name in NAMED.findall(path.read_text())}
    assert "claim_context" not in named  # the engines' own steps are Tx's methods
    assert {"finish_job", "note_job_event", "after_claim"} <= named
    assert named - sqlite_queries().keys() == set()
    assert named - postgres_queries().keys() == set()
