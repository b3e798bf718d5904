"""FailureWitness (store/witness.py): the `since` a supervisor's claims carry."""

from __future__ import annotations

from supervisor.store.witness import FailureWitness

OFFSET = 1000.0  # store time - local time


class Clock:
    def __init__(self) -> None:
        self.now = 10.0

    def __call__(self) -> float:
        return self.now


def witness(clock: Clock) -> FailureWitness:
    seen = FailureWitness(clock, max_wait=5.0)
    seen.answered(clock.now, clock.now + OFFSET, reported=True)
    return seen


def test_before_any_answer_there_is_no_since() -> None:
    clock = Clock()
    assert FailureWitness(clock, max_wait=5.0).since(clock.now) is None


def test_without_failures_a_claim_witnesses_from_its_own_sending() -> None:
    clock = Clock()
    seen = witness(clock)
    clock.now = 12.0
    assert seen.since(clock.now) == 12.0 + OFFSET


def test_after_a_failure_a_claim_witnesses_from_the_failed_call() -> None:
    clock = Clock()
    seen = witness(clock)
    clock.now = 11.0
    sent = seen.sending()
    clock.now = 11.1
    seen.failed(sent)
    clock.now = 13.0
    assert seen.since(clock.now) == 11.0 + OFFSET


def test_a_claim_that_carried_the_failure_clears_it() -> None:
    clock = Clock()
    seen = witness(clock)
    seen.failed(seen.sending())
    clock.now = 13.0
    claim_sent = seen.sending()
    seen.answered(claim_sent, clock.now + OFFSET, reported=True)
    clock.now = 14.0
    assert seen.since(clock.now) == 14.0 + OFFSET


def test_a_renewal_that_went_through_does_not_clear_it() -> None:
    clock = Clock()
    seen = witness(clock)
    failed_at = seen.sending()
    seen.failed(failed_at)
    clock.now = 13.0
    seen.answered(seen.sending(), clock.now + OFFSET, reported=False)
    assert seen.since(clock.now) == failed_at + OFFSET


def test_a_failure_after_the_claim_was_sent_stays_for_the_next_claim() -> None:
    clock = Clock()
    seen = witness(clock)
    claim_sent = seen.sending()
    clock.now = 10.5
    renewal_sent = seen.sending()
    seen.failed(renewal_sent)
    seen.answered(claim_sent, clock.now + OFFSET, reported=True)
    clock.now = 11.0
    assert seen.since(clock.now) == renewal_sent + OFFSET


def test_a_failure_that_took_longer_than_the_store_ever_waits_is_this_process_stalling() -> None:
    clock = Clock()
    seen = witness(clock)
    sent = seen.sending()
    clock.now = sent + 30.0  # frozen (SIGSTOP) with the call in flight
    seen.failed(sent)
    assert seen.since(clock.now) == clock.now + OFFSET


def test_claims_sent_within_a_lease_ttl_of_the_last_failure_still_carry_it() -> None:
    # A holder fenced during the failure cannot renew, so its lease may run out up to a
    # lease's ttl after the store works again: the claims that recover it must carry it.
    clock = Clock()
    seen = witness(clock)
    first_failed = seen.sending()
    seen.failed(first_failed)
    clock.now = 12.0
    seen.failed(seen.sending())  # the last failure
    clock.now = 12.5
    claim_sent = seen.sending()
    seen.answered(claim_sent, clock.now + OFFSET, reported=True, hold=2.0)
    clock.now = 13.9
    assert seen.since(clock.now) == first_failed + OFFSET


def test_the_first_claim_sent_a_lease_ttl_after_the_last_failure_clears_it() -> None:
    clock = Clock()
    seen = witness(clock)
    seen.failed(seen.sending())
    clock.now = 12.0
    seen.failed(seen.sending())
    clock.now = 14.0
    claim_sent = seen.sending()
    seen.answered(claim_sent, clock.now + OFFSET, reported=True, hold=2.0)
    clock.now = 14.5
    assert seen.since(clock.now) == 14.5 + OFFSET
