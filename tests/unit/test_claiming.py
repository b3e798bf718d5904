import math

from supervisor.core.claiming import SETTLE_AFTER, ClaimView, claim_now, next_look, settle_due


def view(**changes: object) -> ClaimView:
    fields: dict[str, object] = dict(free_slots=1, now=10.0, next_look=10.4,
                                     waiting_for_work=False, woken=False)
    fields.update(changes)
    return ClaimView(**fields)  # type: ignore[arg-type]


def test_a_free_slot_is_claimed_for_at_once_when_the_last_claim_filled_every_slot() -> None:
    assert claim_now(view(waiting_for_work=False))


def test_a_freed_slot_waits_for_the_store_while_the_last_claim_left_room() -> None:
    assert not claim_now(view(waiting_for_work=True))
    assert claim_now(view(waiting_for_work=True, woken=True))


def test_with_no_free_slot_only_the_poll_claims_to_recover_leases() -> None:
    assert not claim_now(view(free_slots=0, woken=True))
    assert claim_now(view(free_slots=0, now=10.4))
    assert claim_now(view(free_slots=0, now=10.5, waiting_for_work=True))


def test_the_first_claim_comes_at_once() -> None:
    assert claim_now(view(free_slots=0, next_look=-math.inf))


def test_the_next_look_is_the_poll_or_the_next_due_job_if_sooner() -> None:
    assert next_look(10.0, 0.5, None) == 10.5
    assert next_look(10.0, 0.5, 0.2) == 10.2
    assert next_look(10.0, 0.5, 3.0) == 10.5
    assert next_look(10.0, 0.5, -1.0) == 10.0


def test_results_wait_a_few_milliseconds_for_a_claim_then_go_in_a_settle() -> None:
    assert settle_due(10.0, 10.0) == 10.0 + SETTLE_AFTER
    assert settle_due(10.0, 10.5) == 10.5
    assert settle_due(math.inf, 10.0) == math.inf  # none waits: no settle
