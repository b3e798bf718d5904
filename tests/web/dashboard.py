"""`poolsup web` in a real process, and an HTTP session with it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import httpx

from tests.helpers.pool import wait_for


@dataclass
class Dashboard:
    config: Path
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[str] = field(init=False)
    url: str = field(init=False, default="")
    stderr: str = field(init=False, default="")

    def start(self) -> Dashboard:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "supervisor.cli", "web", "-c", str(self.config),
             "--listen", "127.0.0.1:0", *self.args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, **self.env})
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        found = re.search(r"(http://\S+/)", line)
        if not found:
            _out, errors = self.process.communicate(timeout=20)
            raise AssertionError(f"no URL in {line!r}; stderr: {errors}")
        self.url = found.group(1).rstrip("/")
        return self

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        _out, self.stderr = self.process.communicate(timeout=20)
        return self.process.returncode

    def session(self, token: str | None = None) -> httpx.Client:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, follow_redirects=False,
                            timeout=30)


class _Forms(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.csrf: list[str] = []
        self.buttons = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "input" and values.get("name") == "csrf":
            self.csrf.append(values.get("value") or "")
        if tag == "button":
            self.buttons += 1


def page_forms(html: str) -> _Forms:
    parser = _Forms()
    parser.feed(html)
    return parser


def csrf_of(session: httpx.Client, path: str = "/") -> str:
    """The CSRF value of the session's page at `path` (its cookie is kept)."""
    page = session.get(path)
    assert page.status_code == 200, page.text
    values = set(page_forms(page.text).csrf)
    assert len(values) == 1, values
    return values.pop()


def wait_state(client: object, key: str, state: str, timeout: float = 30.0) -> None:
    wait_for(lambda: client.job(key)["state"] == state, timeout,  # type: ignore[attr-defined]
             message=f"{key} {state}")
