"""Validation of what users hand in: job keys and payloads."""

from __future__ import annotations

from supervisor.errors import InvalidJob

MAX_KEY_LENGTH = 256
DEFAULT_MAX_PAYLOAD = 1024 * 1024


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
    if value < 1:
        raise InvalidJob(f"max_attempts must be at least 1 (got {value})")
    return value
