from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from supervisor import Client
from supervisor.store import opened_store
from supervisor.store.base import Store
from tests.helpers.pool import SupervisorProcess, write_pool
from tests.helpers.redis_server import RedisServer


class Pool:
    """One pool under test: its config, its supervisors, a client."""

    def __init__(self, directory: Path, store: str, name: str) -> None:
        self.directory = directory
        self.store = store
        self.name = name
        self.supervisors: list[SupervisorProcess] = []
        self._clients: list[Client] = []

    def config(self, handlers: dict[str, dict[str, Any]], *, file: str = "pool.toml",
               pool_options: dict[str, Any] | None = None, **supervisor: Any) -> Path:
        return write_pool(self.directory, store=self.store, pool=self.name, handlers=handlers,
                          name=file, pool_options=pool_options, **supervisor)

    def start(
        self, config: Path, *, serving: bool = True, new_session: bool = False,
        env: dict[str, str] | None = None, args: tuple[str, ...] = (),
    ) -> SupervisorProcess:
        index = len(self.supervisors)
        process = SupervisorProcess(config, self.directory / f"supervisor-{index}.log").start(
            env, new_session=new_session, args=args
        )
        self.supervisors.append(process)
        if serving:
            process.wait_serving()
        return process

    def client(self) -> Client:
        client = Client(self.store, pool=self.name)
        self._clients.append(client)
        return client

    def close(self) -> None:
        for process in self.supervisors:
            process.kill()
        for client in self._clients:
            client.close()

    def logs(self) -> str:
        return "\n".join(f"--- {p.log_path.name}\n{p.log()}" for p in self.supervisors)


@pytest.fixture(params=["redis", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path, redis_url: str) -> str:
    """Every supervisor-level test runs on both stores."""
    if request.param == "redis":
        return redis_url
    return f"sqlite:///{tmp_path}/pool.db"


@pytest.fixture
def pool(tmp_path: Path, store_url: str, pool_name: str) -> Iterator[Pool]:
    pool = Pool(tmp_path, store_url, pool_name)
    yield pool
    pool.close()


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "ledger.txt"


@pytest.fixture
async def redis_store(redis_server: RedisServer, pool_name: str) -> AsyncIterator[Store]:
    """A Redis store of its own pool, for tests that drive the supervisor's parts
    in-process against a real Redis."""
    async with opened_store(redis_server.url, pool_name) as store:
        yield store
