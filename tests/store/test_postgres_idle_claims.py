"""An idle pool's claims on PostgreSQL write nothing: the pool's last claim is written
at most every CLAIM_NOTE_EVERY (policy.py), so a claim that finds no work commits
without a transaction id (no WAL record, no vacuum work); a gap in the claims is still
seen."""

from __future__ import annotations

import anyio
import psycopg
import pytest

from supervisor.store import opened_store
from supervisor.store.policy import MIN_CLAIM_GAP
from tests.helpers.postgres_server import PostgresServer
from tests.store.support import claim

pytestmark = pytest.mark.anyio

CLAIMS = 20


def next_transaction_id(conn: psycopg.Connection) -> int:
    row = conn.execute("SELECT txid_snapshot_xmax(txid_current_snapshot())").fetchone()
    assert row is not None
    return int(row[0])


async def test_idle_claims_in_quick_succession_take_no_transaction_id(
    postgres_server: PostgresServer,
) -> None:
    url = postgres_server.fresh_database()
    async with opened_store(url, "p") as store:
        await claim(store, 1)  # the pool's first claim is written down
        with psycopg.connect(url, autocommit=True) as conn:
            before = next_transaction_id(conn)
            for _ in range(CLAIMS):
                assert not (await claim(store, 1)).jobs
            taken = next_transaction_id(conn) - before
    # Each claim took one before (a stray autovacuum's analyze may take one or two).
    assert taken < CLAIMS // 2, taken


async def test_a_gap_in_the_claims_is_still_seen_and_written(
    postgres_server: PostgresServer,
) -> None:
    url = postgres_server.fresh_database()
    async with opened_store(url, "p") as store:
        await claim(store, 1)
        await anyio.sleep(MIN_CLAIM_GAP + 0.2)
        await claim(store, 1)
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute("SELECT last_claim, gap_start, gap_end FROM poolsup.claim_gaps "
                               "WHERE pool = 'p'").fetchone()
    assert row is not None
    last_claim, gap_start, gap_end = row
    assert gap_start is not None and gap_end == last_claim
    assert gap_end - gap_start >= MIN_CLAIM_GAP
