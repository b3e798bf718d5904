"""Whether a claim the store just handed us may start: the same job key can come back
with a new token while an older run of it is still ending here."""

from __future__ import annotations

import enum
from collections.abc import Collection


class Admission(enum.Enum):
    START = "start"  # nothing of this key runs here
    DUPLICATE = "duplicate"  # this very claim (token) is already held: starting it is a no-op
    AFTER_OLDER = "after older"  # an older run of the key is still ending: start once it is gone
    STALE = "stale"  # a newer run of the key is already held: this claim is outdated


def admit_claim(held_tokens: Collection[int], token: int) -> Admission:
    """Decide for a claim of a key whose runs held here have `held_tokens`.

    Tokens only grow, so a claim with a new, higher token means the store has given up
    on every older one: the older run's lease is lost, and its processes must be gone
    before the new run starts (one process of a key at a time).
    """
    if token in held_tokens:
        return Admission.DUPLICATE
    if any(held > token for held in held_tokens):
        return Admission.STALE
    if held_tokens:
        return Admission.AFTER_OLDER
    return Admission.START
