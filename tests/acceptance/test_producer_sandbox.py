"""A schedule's producer runs sandboxed like a job: it cannot read the pool's config
file (which may hold the store's password) or its SQLite store."""

from __future__ import annotations

import json
from pathlib import Path

from tests.acceptance.test_cli import poolsup

PRODUCER = '''
from pathlib import Path

def plan(tick):
    here = Path(__file__).parent
    seen = []
    for name in ("pool.toml", "pool.db"):
        try:
            (here / name).read_bytes()
            seen.append(f"read-{name}")
        except OSError as error:
            seen.append(f"refused-{name}-{error.errno}")
    return {"start": [{"key": key.replace(".", "-"), "handler": "noop", "payload": {}}
                      for key in seen]}
'''


def test_a_producer_cannot_read_the_config_or_the_sqlite_store(tmp_path: Path) -> None:
    (tmp_path / "producer.py").write_text(PRODUCER)
    (tmp_path / "noop.py").write_text("def run(job):\n    return None\n")
    config = tmp_path / "pool.toml"
    config.write_text(f"""
[pool]
name = "p"
store = "sqlite:///{tmp_path}/pool.db"

[handlers.noop]
path = "noop.py"

[schedules.feeds]
every = 3600
producer = "producer.py:plan"
""")
    assert poolsup("status", "-c", str(config)).returncode == 0  # creates the store file

    done = poolsup("plan", "-c", str(config), "feeds", "--json")

    assert done.returncode == 0, done.stderr
    keys = [item["key"] for item in json.loads(done.stdout)["start"]]
    assert [key.rsplit("-", 1)[0] for key in keys] == ["refused-pool-toml", "refused-pool-db"]
