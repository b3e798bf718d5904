"""`dispatch(..., connection=conn)` on PostgreSQL: the job is written in the caller's own
transaction, with a real supervisor on a real server.  A rollback leaves nothing; the
job exists, and runs, only once the transaction commits; an open caller transaction holds
up no other job; through plain psycopg (Client and AsyncClient) and Django's
`transaction.atomic()`.  With another store, `connection=` is a `UsageError`."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from supervisor import AsyncClient, Client, JobNotFound
from supervisor.errors import JobExists, UsageError
from tests.helpers.pool import SupervisorProcess, finished, wait_for, write_pool

HANDLERS: dict[str, dict[str, Any]] = {"echo": {"path": "basic.py", "function": "echo"}}


class Rollback(Exception):
    """Raised inside a transaction to roll it back."""


@pytest.fixture(scope="module")
def served_pool(tmp_path_factory: pytest.TempPathFactory, postgres_url: str,
                ) -> Iterator[str]:
    """A pool on PostgreSQL with one supervisor serving it, for the module; its name."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    directory = tmp_path_factory.mktemp("caller")
    config = write_pool(directory, store=postgres_url, pool=name, handlers=HANDLERS,
                        id="only", capacity=4)
    supervisor = SupervisorProcess(config, directory / "supervisor.log").start()
    try:
        supervisor.wait_serving()
        yield name
    finally:
        supervisor.kill()


@pytest.fixture
def client(served_pool: str, postgres_url: str) -> Iterator[Client]:
    client = Client(postgres_url, pool=served_pool)
    yield client
    client.close()


def test_a_rolled_back_dispatch_leaves_nothing(client: Client, postgres_url: str) -> None:
    with psycopg.connect(postgres_url) as conn, pytest.raises(Rollback), conn.transaction():
        record = client.dispatch("rolled-back", {"x": 1}, handler="echo", connection=conn)
        # The caller's transaction sees its job; nobody else does yet.
        assert record["state"] == "pending" and record["payload"] == {"x": 1}
        with pytest.raises(JobNotFound):
            client.job("rolled-back")
        raise Rollback

    with pytest.raises(JobNotFound):
        client.job("rolled-back")
    # The key is free: nothing of the rolled-back job holds it.
    client.dispatch("rolled-back", {}, handler="echo")
    assert wait_for(lambda: finished(client, "rolled-back"), 20)["state"] == "succeeded"


def test_a_committed_dispatch_runs_once_the_transaction_commits(
    client: Client, postgres_url: str
) -> None:
    with psycopg.connect(postgres_url) as conn:
        with conn.transaction():
            conn.execute("CREATE TEMP TABLE orders (id int)")
            conn.execute("INSERT INTO orders VALUES (7)")
            client.dispatch("order-7", {"order": 7}, handler="echo", connection=conn)
            with pytest.raises(JobNotFound):
                client.job("order-7")
        record = wait_for(lambda: finished(client, "order-7"), 20)

    assert record["state"] == "succeeded"
    assert record["result"]["payload"] == {"order": 7}


def test_dispatch_many_in_a_transaction_is_all_or_nothing(
    client: Client, postgres_url: str
) -> None:
    items = [{"key": f"many-{i}", "handler": "echo", "payload": {"i": i}} for i in range(3)]
    with psycopg.connect(postgres_url) as conn:
        with pytest.raises(Rollback), conn.transaction():
            assert all(r["added"] for r in client.dispatch_many(items, connection=conn))
            raise Rollback
        assert client.jobs_page(prefix="many-") == []
        with conn.transaction():
            results = client.dispatch_many(items + items[:1], connection=conn)

    assert [r["added"] for r in results] == [True, True, True, False]
    for item in items:
        assert wait_for(lambda key=item["key"]: finished(client, key), 20)["state"] == \
            "succeeded"


def test_a_key_live_in_the_pool_is_refused_inside_the_transaction(
    client: Client, postgres_url: str
) -> None:
    client.dispatch("taken", {}, handler="echo", run_at=4e9)  # pending for long
    with psycopg.connect(postgres_url) as conn, conn.transaction(), pytest.raises(JobExists):
        client.dispatch("taken", {}, handler="echo", connection=conn)
    client.stop("taken")


def test_an_open_caller_transaction_holds_up_no_other_job(
    client: Client, postgres_url: str
) -> None:
    with psycopg.connect(postgres_url) as conn, conn.transaction():
        client.dispatch("held-open", {}, handler="echo", connection=conn)
        # Claims, retention and wake-ups skip what the open transaction holds.
        client.dispatch("meanwhile", {}, handler="echo")
        assert wait_for(lambda: finished(client, "meanwhile"), 20)["state"] == "succeeded"
    assert wait_for(lambda: finished(client, "held-open"), 20)["state"] == "succeeded"


@pytest.mark.anyio
async def test_async_client_dispatches_in_an_async_connections_transaction(
    served_pool: str, postgres_url: str
) -> None:
    async with AsyncClient(postgres_url, pool=served_pool) as client:
        async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
            with pytest.raises(Rollback):
                async with conn.transaction():
                    await client.dispatch("async-gone", {}, handler="echo", connection=conn)
                    raise Rollback
            async with conn.transaction():
                await client.dispatch("async-kept", {}, handler="echo", connection=conn)
        with pytest.raises(JobNotFound):
            await client.job("async-gone")
        record = await client.wait("async-kept", timeout=20)
        assert record["state"] == "succeeded"
        with psycopg.connect(postgres_url) as blocking, \
                pytest.raises(UsageError, match="AsyncConnection"):
            await client.dispatch("wrong", {}, handler="echo", connection=blocking)


def test_django_transaction_atomic_both_ways(client: Client, postgres_url: str) -> None:
    from django.conf import settings

    if not settings.configured:
        url = urlsplit(postgres_url)
        settings.configure(
            USE_TZ=True,
            DATABASES={"default": {
                "ENGINE": "django.db.backends.postgresql", "NAME": url.path.lstrip("/"),
                "USER": url.username, "HOST": url.hostname, "PORT": url.port}})
        import django

        django.setup()
    from django.db import connection, transaction

    try:
        with pytest.raises(Rollback), transaction.atomic():
            client.dispatch("django-gone", {}, handler="echo", connection=connection)
            raise Rollback
        with transaction.atomic():
            client.dispatch("django-kept", {"via": "django"}, handler="echo",
                            connection=connection)
            with pytest.raises(JobNotFound):
                client.job("django-kept")
    finally:
        connection.close()

    with pytest.raises(JobNotFound):
        client.job("django-gone")
    record = wait_for(lambda: finished(client, "django-kept"), 20)
    assert (record["state"], record["result"]["payload"]) == ("succeeded", {"via": "django"})


def test_connection_with_another_store_is_a_usage_error(
    tmp_path: Path, postgres_url: str
) -> None:
    client = Client(f"sqlite:///{tmp_path}/pool.db", pool="p")
    try:
        with psycopg.connect(postgres_url) as conn:
            with pytest.raises(UsageError, match="needs a PostgreSQL store"):
                client.dispatch("k", {}, handler="echo", connection=conn)
            with pytest.raises(UsageError, match="needs a PostgreSQL store"):
                client.dispatch_many([{"key": "k", "handler": "echo"}], connection=conn)
        with pytest.raises(JobNotFound):
            client.job("k")
    finally:
        client.close()


@pytest.mark.anyio
async def test_a_connection_on_another_database_is_a_usage_error_in_one_line(
    served_pool: str, postgres_url: str
) -> None:
    # The contract's connection= is "on the pool's PostgreSQL database"; one on another
    # database of the same server (no schema poolsup there) is the caller's mistake, said
    # in one line, not the driver's multi-line "schema does not exist".
    other = urlsplit(postgres_url)._replace(path="/postgres").geturl()
    with Client(postgres_url, pool=served_pool) as client, psycopg.connect(other) as conn:
        for call in (
            lambda: client.dispatch("elsewhere", {}, handler="echo", connection=conn),
            lambda: client.dispatch_many([{"key": "elsewhere", "handler": "echo"}],
                                         connection=conn),
        ):
            with pytest.raises(UsageError, match="pool's database") as raised:
                call()
            assert "\n" not in str(raised.value) and "'postgres'" in str(raised.value)
            conn.rollback()
        with pytest.raises(JobNotFound):
            client.job("elsewhere")
    async with AsyncClient(postgres_url, pool=served_pool) as aclient, \
            await psycopg.AsyncConnection.connect(other) as aconn:
        with pytest.raises(UsageError, match="pool's database"):
            await aclient.dispatch("elsewhere", {}, handler="echo", connection=aconn)


def test_a_connection_on_another_database_with_its_own_poolsup_schema_writes_nothing(
    served_pool: str, postgres_url: str
) -> None:
    # Another database of the same server whose own poolsup schema was made (another
    # application's pool): the job would land where no supervisor of this pool looks.
    name = f"other_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    other = urlsplit(postgres_url)._replace(path=f"/{name}").geturl()
    with Client(other, pool=served_pool) as theirs:
        theirs.pause(["nothing"])  # makes the poolsup schema in that database
    with Client(postgres_url, pool=served_pool) as client, psycopg.connect(other) as conn:
        with pytest.raises(UsageError, match="pool's database") as raised:
            client.dispatch("astray", {}, handler="echo", connection=conn)
        assert "\n" not in str(raised.value) and repr(name) in str(raised.value)
        conn.commit()
        assert conn.execute("SELECT count(*) FROM poolsup.jobs").fetchone() == (0,)
        with pytest.raises(JobNotFound):
            client.job("astray")
