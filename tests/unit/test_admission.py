from supervisor.core.admission import Admission, admit_claim


def test_a_key_not_held_starts() -> None:
    assert admit_claim([], 7) is Admission.START


def test_the_same_token_again_is_a_no_op() -> None:
    assert admit_claim([7], 7) is Admission.DUPLICATE


def test_a_new_token_while_an_older_run_ends_starts_after_it() -> None:
    assert admit_claim([3], 7) is Admission.AFTER_OLDER
    assert admit_claim([3, 5], 7) is Admission.AFTER_OLDER


def test_an_older_token_than_one_held_is_stale() -> None:
    assert admit_claim([9], 7) is Admission.STALE
