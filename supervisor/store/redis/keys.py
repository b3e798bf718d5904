"""Names of a pool's Redis keys, and why every script of a pool works on Redis Cluster.

Every key of a pool starts with `poolsup:{<pool>}:`, so the braces make the pool name
the hash tag: all keys of a pool live in one Redis Cluster slot, on one node.

Scripts declare in KEYS every key they touch, except the three that find jobs while
they run (lua/claim-10+n.lua, lua/members-3.lua, lua/upgrade-layout-3.lua): a claim
cannot know which job hashes it will recover or claim before it has read the queues.
They build those names from the key prefix, as lua/_lib.lua's job_key, notes_key,
queue_key and reserved_key do, and each script's header lists them.  Every script that
starts or ends a run also writes `running_load`, whose name lua/_lib.lua's load_key
builds from `running`'s; it is that script's first write for the job.  Likewise every
script that creates, retries or ends a job drops or expires the job's output keys
(`output`, `output_run`), whose names lua/_lib.lua's output_names builds from the job
hash's; these are its last writes for the job, so that a script stopped there by a
resharding has made its change and left only the output without its expiry.  That is
safe:

- A script without a `#!lua` line may touch keys it did not declare as long as they
  hash to the slot of its declared keys (Redis 7.0 refuses cross-slot keys only for
  scripts with a shebang and for functions), and the node it runs on serves that slot;
  every key of the pool shares the hash tag, so both always hold.
- While the pool's slot is being migrated to another node (resharding), a declared key
  already moved makes Redis answer ASK or TRYAGAIN before the script runs, but an
  undeclared one fails the script where it touches it ("non local key"), after the
  writes it made before.  members writes nothing; upgrade-layout only adds jobs to
  queues, again on its next run; claim reads all of a job's undeclared keys before its
  first write for that job, so it stops between two jobs, each recovered or claimed
  whole, and the supervisor retries it like any store error.  Resharding a busy pool's
  slot is still best done with its supervisors stopped.
"""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.errors import ConfigError
from supervisor.store.records import FINISHED_STATES


def queue_id(handler: str, priority: int) -> str:
    """The claim queue of a handler's jobs of one priority (lua/_lib.lua queue_id)."""
    return f"{handler}:{priority}" if priority > 0 else handler


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
    def running_load(self) -> str:
        """hash: owner NUL handler -> its running jobs (lua/_lib.lua load_key builds the
        same name from `running`'s)."""
        return self.running + "-load"

    @property
    def layout(self) -> str:
        """string: the version of this key layout the pool was brought up to."""
        return self.prefix + "layout"

    def queue(self, handler: str, priority: int = 0) -> str:
        """zset per handler and priority: its pending jobs, scored as in `pending`
        (lua/_lib.lua queue_id and queue_key build the same name)."""
        return f"{self.prefix}queue:{queue_id(handler, priority)}"

    def starts(self, handler: str) -> str:
        """zset per rate-limited handler: the token -> store time (ms) of each start within
        its rate's period (lua/claim-10+n.lua builds the same name)."""
        return f"{self.prefix}starts:{handler}"

    @property
    def settings(self) -> str:
        """hash: the pool's settings that its store enforces (max_pending)."""
        return self.prefix + "settings"

    @property
    def paused(self) -> str:
        """hash: handler (or "*" for the whole pool) -> when it was paused (store ms);
        no claim serves them (lua/claim-10+n.lua builds the same name)."""
        return self.prefix + "paused"

    def reserved(self, supervisor_id: str) -> str:
        """zset per supervisor: the pending jobs released for it (moves), key -> when the
        reservation runs out (store ms), which is also their score in `pending` and in
        their queue (lua/_lib.lua builds the same name)."""
        return f"{self.prefix}reserved:{supervisor_id}"

    def last_claim(self, supervisor_id: str, lane: int = 0) -> str:
        """string per supervisor and claim lane: the id and jobs of its last claim in that
        lane, for a claim sent again after its reply was lost (lua/claim-10+n.lua)."""
        return f"{self.prefix}last-claim{lane or ''}:{supervisor_id}"

    @property
    def write_probe(self) -> str:
        """never written: a script's first write when it must be refused under maxmemory
        (lua/_lib.lua refuse_when_full)."""
        return self.prefix + "write-probe"

    @property
    def epoch(self) -> str:
        """The pool's epoch record: which master it is on, since when (core/failover.py)."""
        return self.prefix + "epoch"

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
        """pub/sub channel of the hints for every supervisor: `w` after a resume."""
        return self.prefix + "events"

    def doorbell(self, supervisor_id: str) -> str:
        """pub/sub channel per supervisor: `w` (a job it may claim), `s:<key>`, `n:<key>`
        and `d:<request>:<key>` for the jobs it holds (lua/_lib.lua ring)."""
        return f"{self.channel}:{supervisor_id}"

    def waiting(self, handler: str) -> str:
        """set per handler: the supervisors whose last claim left them room, of which a
        job made claimable wakes one (lua/_lib.lua waiting_key and wake_waiting)."""
        return f"{self.prefix}waiting:{handler}"

    def stacks_answer(self, request: str) -> str:
        """string per `debug` request (kept a minute): the answer of the supervisor that
        runs the job; also the pub/sub channel that says it was written."""
        return f"{self.prefix}stacks:{request}"

    def ended(self, key: str) -> str:
        """pub/sub channel per job: the job's final state, published when it ends (for
        `wait`; lua/_lib.lua ended_channel builds the same name from `running`'s)."""
        return f"{self.prefix}ended:{key}"

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

    @property
    def schedules(self) -> str:
        """set: the name of every schedule that ever fired."""
        return self.prefix + "schedules"

    def schedule(self, name: str) -> str:
        """hash: a schedule's record (lua/fire-tick-11.lua lists its fields)."""
        return f"{self.prefix}schedule:{name}"

    def schedule_jobs(self, name: str) -> str:
        """zset per schedule: keys of the jobs dispatched with it -> when the entry was
        last checked (store ms).  Entries of jobs no longer live are dropped lazily
        (lua/prune-schedule-jobs-1+n.lua), so readers check each job's own record."""
        return f"{self.prefix}schedule-jobs:{name}"

    def job(self, key: str) -> str:
        """hash: the job record."""
        return f"{self.prefix}job:{key}"

    def output(self, key: str) -> str:
        """hash per job: its runs' output numbers, token -> JSON (lua/append-output-3.lua);
        lua/_lib.lua output_names builds the same name from the job hash's."""
        return f"{self.prefix}output:{key}"

    def output_run(self, key: str, token: int) -> str:
        """string per run of a job: the newest bytes it printed (lua/_lib.lua
        output_names builds the same name)."""
        return f"{self.prefix}output-run:{token}:{key}"

    def notes(self, key: str) -> str:
        """list: notifications waiting for the job, oldest first."""
        return f"{self.prefix}notes:{key}"
