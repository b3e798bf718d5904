"""The job page's Output section (templates/job_live.html): a <pre> per run, oldest
first, a note where bytes were dropped, the text escaped."""

from __future__ import annotations

import re
from dataclasses import dataclass

from supervisor.web.app import templates


@dataclass(frozen=True)
class Output:
    attempt: int
    supervisor: str
    text: str
    dropped_bytes: int
    ended: bool


JOB = {"key": "k1", "handler": "h", "state": "running", "attempts": 2, "max_attempts": 3,
       "token": 9, "supervisor": "sup-1", "payload": {}, "result": None, "error": None,
       "created_at": 0.0, "started_at": 1.0, "finished_at": None, "run_at": None,
       "priority": 0, "group": None, "checkpoint": None, "stop_requested": False,
       "events": []}


def _render(outputs: list[Output]) -> str:
    return templates().get_template("job_live.html").render(
        job=JOB, outputs=outputs, read_only=True, refresh_ms=1500, csrf="", csrf_field="csrf")


def _section(page: str) -> str:
    found = re.search(r'<section id="output">(.*?)</section>', page, re.S)
    assert found
    return found.group(1)


def test_each_run_has_its_pre_oldest_first_with_the_dropped_bytes_noted() -> None:
    section = _section(_render([
        Output(1, "sup-1", "first run\n<script>x()</script>\n", 2048, True),
        Output(2, "sup-2", "second run\n", 0, False),
    ]))
    texts = re.findall(r'<pre class="output">(.*?)</pre>', section, re.S)
    assert texts == ["first run\n&lt;script&gt;x()&lt;/script&gt;\n", "second run\n"]
    assert section.index("Attempt 1") < section.index("Attempt 2")
    assert section.count('class="small dropped"') == 1
    assert "2.0 KiB of earlier output dropped" in section


def test_no_output_says_so() -> None:
    assert "No output." in _section(_render([]))
