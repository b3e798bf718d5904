"""Store URLs as they may be shown (errors, logs, status): every secret replaced by ***.

The secrets: the password of the user info, and every query parameter whose name says
it holds one - a word of the name (split at `_`, `-`, `.`) that is `pass`, `pwd`,
`key` or `auth`, or one that contains `password`, `passwd`, `secret`, `token` or
`credential` (`password`, `ssl_password`, `sentinel_password`, `auth_token`,
`api_key`; not `ssl_keyfile`, a path).  Names are compared percent-decoded and in any
case, as a driver would read them.  A fragment is hidden whole.  Everything else is
shown as written.  A text that is not a URL (libpq's `host=h password=pw` form, a URL
missing its `//`) has the same secrets hidden: the value of each `name=value` whose name
says it holds one, and what stands between the last `:` and the `@`.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, unquote_plus

HIDDEN = "***"
_SECRET_WORDS = frozenset({"pass", "pwd", "key", "auth"})
_SECRET_PARTS = ("password", "passwd", "secret", "token", "credential")
_WORD_SPLIT = re.compile(r"[_.\-]+")


def redact_url(url: str) -> str:
    """`url` with its secrets shown as ***, also when it is not a URL."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return _redact_text(url)
    rest, hash_mark, fragment = rest.partition("#")
    head, question_mark, query = rest.partition("?")
    # The user info ends at the last @ before the query: a password may hold a / too.
    userinfo, at, place = head.rpartition("@")
    if at and ":" in userinfo:
        head = f"{userinfo.partition(':')[0]}:{HIDDEN}@{place}"
    if question_mark:
        query = "&".join(_redact_parameter(part) for part in query.split("&"))
    return (f"{scheme}://{head}{question_mark}{query}"
            + (f"#{HIDDEN}" if hash_mark and fragment else hash_mark))


_KEYWORD_VALUE = re.compile(r"([^\s=&?;]+)(\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&;]*)")


def _redact_text(text: str) -> str:
    """A store setting that is not a URL, its secrets hidden all the same."""
    text = _KEYWORD_VALUE.sub(
        lambda found: (f"{found[1]}{found[2]}{HIDDEN}" if is_secret_parameter(found[1])
                       else found[0]), text)
    head, at, place = text.rpartition("@")
    if at and ":" in head:
        text = f"{head.rpartition(':')[0]}:{HIDDEN}@{place}"
    return text


def is_secret_parameter(name: str) -> bool:
    name = unquote_plus(name).lower()
    words = _WORD_SPLIT.split(name)
    return any(word in _SECRET_WORDS for word in words) or any(
        part in name for part in _SECRET_PARTS)


def _redact_parameter(part: str) -> str:
    name = part.partition("=")[0]
    return f"{name}={HIDDEN}" if is_secret_parameter(name) else part


def redact_in(text: str, url: str) -> str:
    """`text` (a driver's message about `url`) with `url` shown redacted and none of its
    secrets left in it, whole or in part: a driver that refuses a URL may quote it, or
    the token it could not read (libpq: `invalid percent-encoded token: "..."`)."""
    text = text.replace(url, redact_url(url))
    for secret in sorted(_secrets(url), key=len, reverse=True):
        text = text.replace(secret, HIDDEN)
    return text


def _secrets(url: str) -> set[str]:
    """The secret values of `url`, as written and percent-decoded."""
    _scheme, sep, rest = url.partition("://")
    if not sep:
        return set()
    rest, _hash, fragment = rest.partition("#")
    head, _question, query = rest.partition("?")
    values = [fragment]
    userinfo, at, _place = head.rpartition("@")
    if at and ":" in userinfo:
        values.append(userinfo.partition(":")[2])
    for part in query.split("&"):
        name, _eq, value = part.partition("=")
        if is_secret_parameter(name):
            values.append(value)
    found = {form for value in values for form in (value, unquote(value), unquote_plus(value))}
    return {value for value in found if value}
