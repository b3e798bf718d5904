import pytest

from supervisor.core.validation import validate_key, validate_payload_size
from supervisor.errors import InvalidJob, UsageError
from supervisor.run_at import check_run_at


@pytest.mark.parametrize("key", ["k", "a" * 256, "user:42/thumb", "ключ"])
def test_valid_keys(key: str) -> None:
    assert validate_key(key) == key


@pytest.mark.parametrize("key", ["", "a" * 257, "tab\there", "new\nline", "\x00"])
def test_invalid_keys_name_the_problem(key: str) -> None:
    with pytest.raises(InvalidJob, match="invalid job key"):
        validate_key(key)


def test_oversized_payload() -> None:
    with pytest.raises(InvalidJob, match="above the limit"):
        validate_payload_size(b"x" * 11, limit=10)


@pytest.mark.parametrize("run_at", [1e300, -1e300, 1e15])
def test_a_run_at_beyond_what_a_date_can_hold_is_refused(run_at: float) -> None:
    with pytest.raises(UsageError, match="run_at"):
        check_run_at(run_at)
