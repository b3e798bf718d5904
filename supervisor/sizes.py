"""Sizes and durations as users write them, and how a bad value is shown back to them."""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal

from supervisor.errors import ConfigError

_UNITS = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
# Units are case-sensitive on purpose: "MB" would be ambiguous (1000 or 1024?).
_SIZE = re.compile(r"(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>B|KiB|MiB|GiB)?")


def parse_size(value: object, *, where: str) -> int:
    """Bytes from an integer or a string like "512MiB", "1.5 GiB", "100KiB", "10B", "2048".

    Fractions are allowed with KiB, MiB and GiB and rounded down to whole bytes.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        number, unit = Decimal(value), "B"
    elif isinstance(value, str) and (match := _SIZE.fullmatch(value.strip())):
        number, unit = Decimal(match["number"]), match["unit"] or "B"
    else:
        raise ConfigError(
            f'{where} must be a size in bytes or a string like "512MiB" (got {describe(value)})'
        )
    if unit == "B" and number != number.to_integral_value():
        raise ConfigError(f"{where} must be a whole number of bytes (got {describe(value)})")
    if number < 0:
        raise ConfigError(f"{where} must not be negative (got {describe(value)})")
    return int(number * _UNITS[unit])


def parse_duration(value: object, *, where: str) -> float:
    """Seconds from an int or a float; booleans are not numbers."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where} must be a number of seconds (got {describe(value)})")
    if not math.isfinite(value):
        raise ConfigError(f"{where} must be a finite number of seconds (got {describe(value)})")
    return float(value)


def describe(value: object) -> str:
    """A TOML value as the user would recognise it in an error message."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
        return text if len(text) <= 60 else text[:56] + '..."'
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return f"a {type(value).__name__}"
