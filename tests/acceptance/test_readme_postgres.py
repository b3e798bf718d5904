"""The README's dispatch inside your own transaction (its psycopg example, read from
README.md at test time), run as written by a program against a real PostgreSQL server
and a real supervisor; only the names it takes as given (DATABASE_URL, client, order_id,
an `orders` table) are set up before it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import psycopg

from supervisor import Client
from tests.helpers.pool import SupervisorProcess, write_pool

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "### PostgreSQL, and a dispatch inside your own transaction"


def psycopg_example() -> str:
    """The first paragraph of the section's ```python block: the plain psycopg one."""
    _, found, after = README.read_text().partition(f"\n{SECTION}\n")
    assert found, f"README.md has no {SECTION!r}"
    block = re.search(r"```python\n(.*?)```", after, re.S)
    assert block, "the section has no ```python block"
    example = block.group(1).split("\n\n")[0]
    assert "connection=conn" in example, example
    return example


def test_the_readme_psycopg_example_runs_as_written(tmp_path: Path, postgres_url: str,
                                                    pool_name: str) -> None:
    config = write_pool(tmp_path, store=postgres_url, pool=pool_name, id="only",
                        handlers={"invoice": {"path": "basic.py", "function": "echo"}})
    supervisor = SupervisorProcess(config, tmp_path / "supervisor.log").start()
    table = f"orders_{pool_name.replace('-', '_')}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY)")
    program = (
        f"from supervisor import Client\n"
        f"DATABASE_URL = {postgres_url!r}\n"
        f"client = Client.from_config({str(config)!r})\n"
        f"order_id = 7\n"
        + psycopg_example().replace("INTO orders ", f"INTO {table} ")
        + "\nclient.close()\n")
    try:
        supervisor.wait_serving()
        ran = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                             timeout=60)
        assert ran.returncode == 0, ran.stderr

        with Client(postgres_url, pool=pool_name) as client:
            record = client.wait("invoice-7", timeout=30)
        assert (record["state"], record["payload"]) == ("succeeded", {"order": 7}), record
        with psycopg.connect(postgres_url) as conn:
            assert conn.execute(f"SELECT id FROM {table}").fetchall() == [(7,)]
    finally:
        supervisor.kill()
