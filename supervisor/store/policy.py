"""Numbers every store applies the same way, so that they agree (the conformance suite
checks that they do)."""

from __future__ import annotations

from supervisor.core.failover import FAILOVER_MARGIN, TOKEN_EPOCH_BITS

# A supervisor is listed by `snapshot` while seen within this many of its lease ttls.
LIVE_TTLS = 3
# Its entry is deleted only once silent for longer than max(LIVE_TTLS x lease_ttl,
# MEMBER_GARBAGE_AFTER): a stalled supervisor that wakes up must still find it.
MEMBER_GARBAGE_AFTER = 3600.0
# A store that took no write for this long "starts" taking them again at the next one
# (StoreHealth.since).
HEALTH_GAP = 10.0
# A lease held this many lease ttls resets the job's count of losses in a row.
LOSSES_RESET_TTLS = 3
# A claim whose supervisor's calls had failed or gone unanswered for at least this long
# spans a failing window of the store: leases that ended in it are recovered without
# counting a loss (core/lease_losses.py).  Shorter is the ordinary time a call takes.
MIN_FAILING_SPAN = 0.25
# A claim that comes this long or more after the pool's last claim ends a gap in which no
# supervisor reached the store; a lease that ended in it is left to a claim that
# witnessed the gap, for JUDGE_AFTER_GAP after it (core/lease_losses.py judged_later).
# Live supervisors claim every half second and retry a failing store within a second.
MIN_CLAIM_GAP = 1.0
JUDGE_AFTER_GAP = 2.0
# The PostgreSQL and Redis stores write the time of the pool's last claim only when the
# one they find is this old or more (core/lease_losses.py claim_note_due): an idle pool's
# claims then write nothing (on PostgreSQL they commit without a transaction id or a WAL
# record).  A gap may
# look this much longer than it was: a lease that ended in it waits for a witness.
CLAIM_NOTE_EVERY = 0.25


def claim_deadline(sent_at: float | None, lease_ttl: float) -> float | None:
    """The store time after which a claim sent at `sent_at` (store time) hands out no
    job: held up that long (a frozen store), it may run after its sender stopped, and
    its jobs' fences, counted from the sending, would be near.  A second at least: a
    claim on a busy machine is not held up."""
    return None if sent_at is None else sent_at + max(lease_ttl / 2, 1.0)
# A test-only switch: with it set to "1" in a supervisor's environment, its claims hand
# out jobs at once after a change of the store's master (no lock-delay), so that a test
# can show the double run the delay prevents (tests/integration/test_failover.py).
NO_LOCK_DELAY_ENV = "POOLSUP_TEST_NO_LOCK_DELAY"
# Each job keeps the newest this many events of its history.
HISTORY_LIMIT = 100
# An event's detail is cut to this many characters (the first line of an error).
DETAIL_CHARS = 300
# A run's output is cut back to its newest max_log bytes only once it holds this many
# more, so that the cut (a copy of what is kept) happens once per slack bytes written.
OUTPUT_SLACK_SHARE = 4
MIN_OUTPUT_SLACK = 4096


# A claim recovers at most this many expired leases; a claim that looks for jobs under a
# per-group limit reads this many more of a queue, past the jobs a full group skips.
RECOVER_BATCH = 100
GROUP_SCAN = 200
# A job's end trims its done list of the entries past the retention when its token is a
# multiple of this (readers count and list by score, so a late trim changes no answer).
DONE_TRIM_EVERY = 8


def output_slack(max_bytes: int) -> int:
    """Bytes a run's kept output may hold past `max_bytes` before the store cuts it."""
    return max(max_bytes // OUTPUT_SLACK_SHARE, MIN_OUTPUT_SLACK)


def lua_policy() -> dict[str, int]:
    """The numbers the Redis scripts apply, as lua/_lib.lua's table POLICY (scripts.py
    writes it ahead of every script): each is defined here or in core/, never in Lua."""
    return {
        "history_limit": HISTORY_LIMIT,
        "detail_chars": DETAIL_CHARS,
        "recover_batch": RECOVER_BATCH,
        "group_scan": GROUP_SCAN,
        "done_trim_every": DONE_TRIM_EVERY,
        "live_ttls": LIVE_TTLS,
        "losses_reset_ttls": LOSSES_RESET_TTLS,
        "failover_margin_ms": round(FAILOVER_MARGIN * 1000),
        "token_epoch": 1 << TOKEN_EPOCH_BITS,
    }
