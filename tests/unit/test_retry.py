import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.core.retry import backoff_delay


def test_backoff_doubles_per_attempt() -> None:
    assert backoff_delay(1, 1.0) == 1.0
    assert backoff_delay(2, 1.0) == 2.0
    assert backoff_delay(3, 1.0) == 4.0
    assert backoff_delay(3, 0.0) == 2.0


def test_backoff_is_capped() -> None:
    assert backoff_delay(50, 1.0, cap=300.0) == 300.0


@given(st.integers(min_value=1, max_value=100), st.floats(min_value=0.0, max_value=1.0))
def test_backoff_stays_within_half_and_full_ceiling(attempt: int, fraction: float) -> None:
    ceiling = min(300.0, 2.0 ** (attempt - 1))
    assert ceiling / 2 <= backoff_delay(attempt, fraction) <= ceiling


def test_random_fraction_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="random_fraction"):
        backoff_delay(1, 1.5)


def test_loop_retry_delay_doubles_and_is_capped() -> None:
    from supervisor.core.retry import LOOP_RETRY_CAP, loop_retry_delay

    assert loop_retry_delay(1) == 0.1
    assert loop_retry_delay(2) == 0.2
    assert loop_retry_delay(100) == LOOP_RETRY_CAP
