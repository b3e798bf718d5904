"""Reading a TOML config: typed getters that report errors with the file, line and key.

tomllib gives values without positions, so the text is kept to find the line of a
table or key when something in it is wrong.
"""

from __future__ import annotations

import difflib
import keyword
import os
import re
import tomllib
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from supervisor.core.validation import LARGEST_STORED_INTEGER
from supervisor.errors import ConfigError
from supervisor.sizes import describe, parse_duration, parse_size

_D = TypeVar("_D")
NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
# A table header line; the anchors keep array lines such as `  [1, 2],` out.
_HEADER = re.compile(r"\s*\[\[?[^\[\]=]+\]\]?\s*(?:#.*)?$")
# Past this a duration breaks what holds it (a C long of seconds for the CPU rlimit), so
# it is a config error rather than a crash later; so is an integer past
# LARGEST_STORED_INTEGER.
LONGEST_DURATION = 1_000_000_000  # seconds, about 31 years


class TomlDocument:
    """The text of the config file, kept to find line numbers that tomllib does not give."""

    def __init__(self, name: str, text: str, data: dict[str, Any]) -> None:
        self.name = name
        self.lines = text.splitlines()
        self.data = data

    @classmethod
    def read(cls, path: Path) -> TomlDocument:
        name = str(path)
        try:
            text = path.read_bytes().decode("utf-8")
        except OSError as error:
            reason = f"[Errno {error.errno}] {error.strerror}" if error.errno else str(error)
            raise ConfigError(f"{name}: cannot read: {reason}") from None
        except UnicodeDecodeError as error:
            raise ConfigError(f"{name}: invalid TOML: not UTF-8 (byte {error.start})") from None
        try:
            return cls(name, text, tomllib.loads(text))
        except tomllib.TOMLDecodeError as error:
            message = " ".join(str(error).split())
            line = re.search(r"\(at line (\d+), column \d+\)", message)
            where = f"{name}:{line[1]}" if line else name
            raise ConfigError(f"{where}: invalid TOML: {message}") from None

    def line_of(self, path: tuple[str, ...]) -> int | None:
        """Best effort: the 1-based line of a table or key, found by scanning the text."""
        for split in range(len(path), -1, -1):
            start = self._header(path[:split])
            if start is None:
                continue
            if split == len(path):
                return start + 1 if split else None
            found = self._key(start, path[split:])
            if found is not None:
                return found + 1
        return None

    def _header(self, parts: tuple[str, ...]) -> int | None:
        if not parts:
            return -1
        pattern = re.compile(rf"\s*\[\[?\s*{_dotted(parts)}\s*\]")
        return next((i for i, line in enumerate(self.lines) if pattern.match(line)), None)

    def _key(self, start: int, parts: tuple[str, ...]) -> int | None:
        end = next(
            (i for i in range(start + 1, len(self.lines)) if _HEADER.match(self.lines[i])),
            len(self.lines),
        )
        # The whole dotted key first, then shorter prefixes (an inline table's line).
        for size in range(len(parts), 0, -1):
            pattern = re.compile(rf"\s*{_dotted(parts[:size])}\s*[=.]")
            for i in range(start + 1, end):
                if pattern.match(self.lines[i]):
                    return i
        return None


def _dotted(parts: tuple[str, ...]) -> str:
    quoted = (rf"""(?:{re.escape(p)}|"{re.escape(p)}"|'{re.escape(p)}')""" for p in parts)
    return r"\s*\.\s*".join(quoted)


class TomlTable:
    """One TOML table being read, with typed getters whose errors name the file and key."""

    def __init__(self, doc: TomlDocument, path: tuple[str, ...], data: dict[str, Any]) -> None:
        self.doc = doc
        self.path = path
        self.data = data

    def where(self, key: str | None, *, show_key: bool = True) -> str:
        """`file:line: [table] key`, for the start of an error message."""
        line = self.doc.line_of(self.path if key is None else (*self.path, key))
        parts = [f"{self.doc.name}:{line}:" if line else f"{self.doc.name}:"]
        if self.path:
            parts.append(f"[{'.'.join(self.path)}]")
        if key is not None and show_key:
            parts.append(key)
        return " ".join(parts)

    def fail(self, key: str | None, problem: str, *, show_key: bool = True) -> ConfigError:
        return ConfigError(f"{self.where(key, show_key=show_key)} {problem}")

    def missing(self, key: str) -> NoReturn:
        raise self.fail(None, f"{key} is required")

    def only(self, *allowed: str) -> None:
        for key, value in self.data.items():
            if key in allowed:
                continue
            close = difflib.get_close_matches(key, allowed, n=1)
            hint = f' (did you mean "{close[0]}"?)' if close else ""
            if not self.path and isinstance(value, dict):
                raise self.fail(key, f"unknown table [{key}]{hint}", show_key=False)
            raise self.fail(key, f"unknown key {describe(key)}{hint}", show_key=False)

    def table_name(self, key: str, what: str) -> str:
        if not NAME.fullmatch(key):
            problem = f"invalid {what} name {describe(key)}: use 1-64 of A-Z a-z 0-9 _ . -"
            raise self.fail(key, problem, show_key=False)
        return key

    def table(self, key: str, *, required: bool = False) -> TomlTable:
        value = self.data.get(key, None if required else {})
        child = TomlTable(self.doc, (*self.path, key), value if isinstance(value, dict) else {})
        if value is None:
            raise child.fail(None, "is required")
        if not isinstance(value, dict):
            raise child.fail(None, f"must be a table (got {describe(value)})")
        return child

    def string(self, key: str, default: _D) -> str | _D:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, str) or not value:
            raise self.fail(key, f"must be a non-empty string (got {describe(value)})")
        return value

    def identifier(self, key: str, default: str) -> str:
        value = self.string(key, default)
        if not is_identifier(value):
            raise self.fail(key, f"must be a Python identifier (got {describe(value)})")
        return value

    def flag(self, key: str, default: _D) -> bool | _D:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(key, f"must be true or false (got {describe(value)})")
        return value

    def integer(self, key: str, default: _D, *, low: int, high: int | None = None) -> int | _D:
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"must be an integer (got {describe(value)})")
        return int(self._in_range(key, value, low=low,
                                  high=LARGEST_STORED_INTEGER if high is None else high))

    def seconds(self, key: str, default: _D, *, low: float, above: bool = False) -> float | _D:
        value = self.data.get(key)
        if value is None:
            return default
        seconds = parse_duration(value, where=self.where(key))
        return self._in_range(key, seconds, low=low, high=LONGEST_DURATION, above=above)

    def size(self, key: str, default: _D, *, zero: bool = False) -> int | _D:
        """A size above 0 (with `zero`: 0 or above)."""
        value = self.data.get(key)
        if value is None:
            return default
        size = parse_size(value, where=self.where(key))
        return int(self._in_range(key, size, low=0, high=LARGEST_STORED_INTEGER, above=not zero))

    def location(self, key: str, base: Path, *, directory: bool) -> Path | None:
        value = self.string(key, None)
        if value is None:
            return None
        resolved = Path(os.path.abspath(base / value))
        if not resolved.exists():
            raise self.fail(key, f"{describe(value)} does not exist")
        if resolved.is_dir() != directory:
            raise self.fail(
                key, f"{describe(value)} is not a {'directory' if directory else 'file'}"
            )
        return resolved

    def _in_range(
        self, key: str, value: float, *, low: float, high: float | None = None, above: bool = False
    ) -> float:
        if above and value <= low:
            raise self.fail(key, f"must be greater than {low:g} (got {describe(value)})")
        if value < low:
            raise self.fail(key, f"must be at least {low:g} (got {describe(value)})")
        if high is not None and value > high:
            limit = high if isinstance(high, int) else f"{high:g}"
            raise self.fail(key, f"must be at most {limit} (got {describe(value)})")
        return value


def is_identifier(text: str) -> bool:
    return text.isidentifier() and not keyword.iskeyword(text)
