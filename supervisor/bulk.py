"""Many jobs at once: every item checked before any is sent, then sent in chunks of
DISPATCH_CHUNK, one store round trip each, with a result per item.

A refused item leaves the others as they are: `Store.dispatch_each` adds the rest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from supervisor.errors import DispatchRefused, UsageError
from supervisor.store.base import Store
from supervisor.store.records import DISPATCH_CHUNK, DispatchRequest
from supervisor.store.refusals import reason_of

ITEM_FIELDS = frozenset({"key", "handler", "payload", "priority", "group", "run_at",
                         "max_attempts", "unique_for"})


def item_fields(item: object) -> dict[str, Any]:
    """An item's fields, checked for shape only (the client checks their values)."""
    if not isinstance(item, Mapping):
        raise UsageError(f"must be a JSON object with a key (got {type(item).__name__})")
    unknown = sorted(set(item) - ITEM_FIELDS)
    if unknown:
        raise UsageError(f"unknown field(s) {', '.join(map(repr, unknown))} "
                         f"(known: {', '.join(sorted(ITEM_FIELDS))})")
    if not isinstance(item.get("key"), str):
        raise UsageError(f"needs a string key (got {item.get('key')!r})")
    return dict(item)


def read_jsonl(lines: Iterable[bytes], name: str) -> list[tuple[int, dict[str, Any]]]:
    """(line number, item) for each non-blank line; a malformed line is a UsageError
    naming `name` and its line number."""
    items = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            items.append((number, item_fields(orjson.loads(line))))
        except orjson.JSONDecodeError as error:
            raise UsageError(f"{name}:{number}: not valid JSON: {error}") from None
        except UsageError as error:
            raise UsageError(f"{name}:{number}: {error.message}") from None
    return items


async def dispatch_chunks(store: Store, requests: Sequence[DispatchRequest]
                          ) -> list[dict[str, Any]]:
    """A result per request, in order: {"key", "added": True}, or {"key", "added":
    False, "error": one line why}."""
    results: list[dict[str, Any]] = []
    for start in range(0, len(requests), DISPATCH_CHUNK):
        chunk = requests[start:start + DISPATCH_CHUNK]
        results += chunk_results(chunk, await store.dispatch_each(chunk))
    return results


def chunk_results(requests: Sequence[DispatchRequest],
                  refusals: Sequence[DispatchRefused | None]) -> list[dict[str, Any]]:
    """A result per request of one chunk, as `dispatch_chunks` gives them."""
    return [{"key": request.key, "added": True} if refused is None
            else {"key": request.key, "added": False, "error": reason_of(refused, request.key)}
            for request, refused in zip(requests, refusals, strict=True)]
