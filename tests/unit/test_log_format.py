"""How log lines read: text, text for the journal, and JSON with each job's key and token."""

from __future__ import annotations

import io
import logging
import os
import sys
from pathlib import Path
from typing import Any

import orjson

from supervisor.service.log_format import JsonFormatter, formatter_for, stderr_is_journal


def record(msg: str, *args: Any, level: int = logging.INFO, **extra: Any) -> logging.LogRecord:
    made = logging.LogRecord("poolsup.jobs", level, __file__, 1, msg, args, None)
    made.__dict__.update(extra)
    return made


def as_json(made: logging.LogRecord) -> dict[str, Any]:
    value: dict[str, Any] = orjson.loads(JsonFormatter().format(made))
    return value


def test_json_line_has_time_level_logger_and_message() -> None:
    line = as_json(record("supervisor %s serving pool %s", "web-1", "media"))
    assert line["level"] == "INFO"
    assert line["logger"] == "poolsup.jobs"
    assert line["message"] == "supervisor web-1 serving pool media"
    assert isinstance(line["time"], float)
    assert "key" not in line and "token" not in line


def test_json_line_about_a_job_carries_its_key_and_token() -> None:
    line = as_json(record("[%s] attempt %d failed, retry in %.1f s (token %d): %s",
                          "thumb-1", 1, 2.0, 7, "ValueError: token 99"))
    assert (line["key"], line["token"]) == ("thumb-1", 7)


def test_a_key_with_brackets_and_a_token_in_the_error_text_are_read_right() -> None:
    line = as_json(record("[%s] %s (token %d)", "a] (token 5) [b", "lost token 3", 12))
    assert (line["key"], line["token"]) == ("a] (token 5) [b", 12)


def test_the_started_line_carries_its_token() -> None:
    line = as_json(record("[%s] started %s attempt %d token %d pid %s", "k", "h", 1, 4, 321))
    assert (line["key"], line["token"]) == ("k", 4)


def test_a_job_line_without_a_token_carries_its_key() -> None:
    line = as_json(record("[%s] %s", "k", "output line"))
    assert line["key"] == "k"
    assert "token" not in line


def test_an_already_formatted_job_line_is_parsed_from_its_text() -> None:
    line = as_json(record("[k-2] released (token 8): drain"))
    assert (line["key"], line["token"]) == ("k-2", 8)


def test_key_and_token_given_as_extra_win() -> None:
    line = as_json(record("something about a job", key="k-3", token=9))
    assert (line["key"], line["token"]) == ("k-3", 9)


def test_json_line_carries_the_traceback() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        made = logging.LogRecord("poolsup", logging.ERROR, __file__, 1, "failed", (),
                                 sys.exc_info())
    line = as_json(made)
    assert "ValueError: boom" in line["traceback"]
    assert "\n" not in JsonFormatter().format(made)


def test_text_has_a_timestamp_except_in_the_journal() -> None:
    made = record("[%s] succeeded (token %d)", "k", 3, level=logging.WARNING)
    assert formatter_for("text", journal=False).format(made).endswith(
        " WARNING poolsup.jobs: [k] succeeded (token 3)"
    )
    assert formatter_for("text", journal=False).format(made)[:2] == "20"
    assert formatter_for("text", journal=True).format(made) == (
        "<4>WARNING poolsup.jobs: [k] succeeded (token 3)"
    )


def test_every_line_of_a_multiline_record_keeps_its_priority_in_the_journal() -> None:
    made = record("first\nsecond", level=logging.ERROR)
    assert formatter_for("text", journal=True).format(made) == (
        "<3>ERROR poolsup.jobs: first\n<3>second"
    )


def test_json_in_the_journal_keeps_its_priority_prefix() -> None:
    text = formatter_for("json", journal=True).format(record("hello", level=logging.ERROR))
    assert text.startswith("<3>{")
    assert orjson.loads(text[3:])["message"] == "hello"


def test_stderr_is_the_journal_only_when_journal_stream_names_it(tmp_path: Path) -> None:
    path = tmp_path / "stream"
    with path.open("w") as stream:
        stat = os.fstat(stream.fileno())
        journal = {"JOURNAL_STREAM": f"{stat.st_dev}:{stat.st_ino}"}
        assert stderr_is_journal(journal, stream)
        assert not stderr_is_journal({"JOURNAL_STREAM": f"{stat.st_dev}:{stat.st_ino + 1}"},
                                     stream)
        assert not stderr_is_journal({"JOURNAL_STREAM": "garbage"}, stream)
        assert not stderr_is_journal({}, stream)
    assert not stderr_is_journal(journal, io.StringIO())  # no file descriptor
