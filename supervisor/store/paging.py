"""What every store shares for `Store.jobs_page` and `Store.latest_finished`: the checks,
and the bounds of a key prefix."""

from __future__ import annotations

import re

from supervisor.store.records import FINISHED_STATES

PAGE_LIMIT_MAX = 1000
# Not printable, so never in a key (core/validation.py): every key that starts with a
# prefix sorts below the prefix followed by it.
_ABOVE_EVERY_CHARACTER = "\U0010ffff"


def checked_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= PAGE_LIMIT_MAX:
        raise ValueError(f"page limit must be 1-{PAGE_LIMIT_MAX} (got {limit!r})")
    return limit


def checked_finished(state: str) -> str:
    if state not in FINISHED_STATES:
        raise ValueError(f"{state!r} is not a finished state (one of "
                         f"{', '.join(FINISHED_STATES)})")
    return state


def prefix_upper_bound(prefix: str) -> str:
    """A string above every key that starts with `prefix`."""
    return prefix + _ABOVE_EVERY_CHARACTER


def glob_pattern(prefix: str) -> str:
    """A Redis MATCH pattern for the keys that start with `prefix` taken literally."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", prefix) + "*"


def on_page(key: str, prefix: str, after: str) -> bool:
    return key > after and key.startswith(prefix)
