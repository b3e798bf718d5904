from supervisor.core.claiming import wait_before_claim


def test_a_free_slot_claims_at_once() -> None:
    assert wait_before_claim(1, now=10.0, last_claim=9.9, poll_interval=0.5) == 0.0


def test_a_full_supervisor_claims_only_to_recover_once_a_poll_interval() -> None:
    assert abs(wait_before_claim(0, now=10.0, last_claim=9.9, poll_interval=0.5) - 0.4) < 1e-9
    assert wait_before_claim(0, now=10.5, last_claim=9.9, poll_interval=0.5) == 0.0


def test_a_full_supervisor_that_never_claimed_claims_now() -> None:
    assert wait_before_claim(0, now=10.0, last_claim=float("-inf"), poll_interval=0.5) == 0.0
