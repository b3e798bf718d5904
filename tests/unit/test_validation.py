import pytest

from supervisor.core.validation import validate_key, validate_payload_size
from supervisor.errors import InvalidJob


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
