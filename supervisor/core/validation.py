"""Validation of what users hand in: job keys, payloads and dispatch options."""

from __future__ import annotations

import math

from supervisor.errors import InvalidJob

MAX_KEY_LENGTH = 256
MAX_PRIORITY = 9
DEFAULT_MAX_PAYLOAD = 1024 * 1024
# The largest integer the stores and the JSON encoder hold (SQLite's and orjson's
# signed 64 bits): past it a value is refused, not a crash later.
LARGEST_STORED_INTEGER = 2**63 - 1
MAX_ATTEMPTS = LARGEST_STORED_INTEGER


def validate_key(key: str) -> str:
    if not 1 <= len(key) <= MAX_KEY_LENGTH:
        raise InvalidJob(f"invalid job key: must be 1-{MAX_KEY_LENGTH} characters (got {len(key)})")
    if not key.isprintable():
        raise InvalidJob(f"invalid job key {key!r}: must be printable characters only")
    return key


def validate_payload_size(payload: bytes, limit: int = DEFAULT_MAX_PAYLOAD) -> bytes:
    if len(payload) > limit:
        raise InvalidJob(f"payload is {len(payload)} bytes, above the limit of {limit} bytes")
    return payload


def validate_max_attempts(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ATTEMPTS:
        raise InvalidJob(f"max_attempts must be an integer 1-{MAX_ATTEMPTS} (got {value!r})")
    return value


def validate_priority(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_PRIORITY:
        raise InvalidJob(f"priority must be an integer 0-{MAX_PRIORITY} (got {value!r})")
    return value


def validate_group(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_KEY_LENGTH \
            or not value.isprintable():
        raise InvalidJob(f"group must be 1-{MAX_KEY_LENGTH} printable characters "
                         f"(got {value!r})")
    return value


def validate_unique_for(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or value < 0:
        raise InvalidJob(f"unique_for must be 0 or more seconds (got {value!r})")
    return float(value)
