"""Names of a pool's Redis keys.

Every key of a pool starts with `poolsup:{<pool>}:`, so the braces make the pool name
the hash tag: all keys of a pool live in one Redis Cluster slot, and one script may
touch any of them.  lua/_lib.lua builds the per-job names (`job:`, `notes:`), the
per-handler queues (`queue:`) and the per-supervisor reservations (`reserved:`) the same
way for the keys scripts find while they run.
"""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.errors import ConfigError
from supervisor.store.base import FINISHED_STATES


@dataclass(frozen=True)
class PoolKeys:
    pool: str

    def __post_init__(self) -> None:
        if not self.pool or "{" in self.pool or "}" in self.pool:
            raise ConfigError(f"pool name {self.pool!r} must be non-empty, without braces")

    @property
    def prefix(self) -> str:
        return f"poolsup:{{{self.pool}}}:"

    @property
    def pending(self) -> str:
        """zset: key -> when it becomes claimable (store ms)."""
        return self.prefix + "pending"

    @property
    def running(self) -> str:
        """zset: key -> lease deadline (store ms)."""
        return self.prefix + "running"

    @property
    def layout(self) -> str:
        """string: the version of this key layout the pool was brought up to."""
        return self.prefix + "layout"

    def queue(self, handler: str) -> str:
        """zset per handler: its pending jobs, scored as in `pending` (lua/_lib.lua builds
        the same name)."""
        return f"{self.prefix}queue:{handler}"

    def reserved(self, supervisor_id: str) -> str:
        """zset per supervisor: the pending jobs released for it (moves), key -> when the
        reservation runs out (store ms), which is also their score in `pending` and in
        their queue (lua/_lib.lua builds the same name)."""
        return f"{self.prefix}reserved:{supervisor_id}"

    @property
    def health(self) -> str:
        """hash: `last_ok` and `ok_since`, when the store last took a write and since
        when it has been taking them (store ms)."""
        return self.prefix + "health"

    @property
    def token(self) -> str:
        """string: the pool's fencing-token counter."""
        return self.prefix + "token"

    @property
    def supervisors(self) -> str:
        """hash: supervisor id -> info JSON."""
        return self.prefix + "sup"

    @property
    def seen(self) -> str:
        """zset: supervisor id -> when the store last heard from it (store ms)."""
        return self.prefix + "seen"

    @property
    def channel(self) -> str:
        """pub/sub channel of change hints: `w`, `s:<key>`, `n:<key>`."""
        return self.prefix + "events"

    def done(self, state: str) -> str:
        """zset per finished state: key -> finished_at (store ms)."""
        assert state in FINISHED_STATES, state
        return f"{self.prefix}done:{state}"

    @property
    def all_done(self) -> tuple[str, str, str]:
        return self.done("succeeded"), self.done("failed"), self.done("stopped")

    @property
    def by_state(self) -> dict[str, str]:
        """The zset that lists the jobs of each state."""
        return {"pending": self.pending, "running": self.running,
                **{state: self.done(state) for state in ("succeeded", "failed", "stopped")}}

    def job(self, key: str) -> str:
        """hash: the job record."""
        return f"{self.prefix}job:{key}"

    def notes(self, key: str) -> str:
        """list: notifications waiting for the job, oldest first."""
        return f"{self.prefix}notes:{key}"
