"""How log lines read: text, text for the journal, and JSON with each job's key and token."""

from __future__ import annotations

import io
import logging
import os
import sys
from pathlib import Path
from typing import Any

import orjson

from supervisor.observe.job_log import JobLog
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


def job_record(msg: str, *args: Any, key: str = "thumb-1", token: int | None = 7,
               level: int = logging.INFO) -> logging.LogRecord:
    """The record a job's logger (`JobLog`) makes."""
    made: list[logging.LogRecord] = []
    logger = logging.getLogger("poolsup.test-job-log")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    handler = logging.Handler()
    handler.emit = made.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    try:
        JobLog(logger, key, token).log(level, msg, *args)
    finally:
        logger.removeHandler(handler)
    (one,) = made
    return one


def test_json_line_about_a_job_carries_its_key_and_token() -> None:
    line = as_json(job_record("attempt %d failed, retry in %.1f s: %s", 1, 2.0,
                              "ValueError: token 99"))
    assert (line["key"], line["token"]) == ("thumb-1", 7)
    assert line["message"] == "[thumb-1] attempt 1 failed, retry in 2.0 s: ValueError: token 99 " \
        "(token 7)"


def test_a_key_with_brackets_percents_and_a_token_in_its_text_is_carried_as_it_is() -> None:
    key = "a] (token 5) %s %d [b"
    line = as_json(job_record("%s", "lost token 3", key=key, token=12))
    assert (line["key"], line["token"]) == (key, 12)
    assert line["message"] == f"[{key}] lost token 3 (token 12)"


def test_a_job_line_without_a_token_carries_its_key() -> None:
    line = as_json(job_record("lease of %s expired", "b", token=None))
    assert line["key"] == "thumb-1"
    assert "token" not in line
    assert line["message"] == "[thumb-1] lease of b expired"


def test_text_lines_about_a_job_show_its_key_and_its_token_on_the_first_line() -> None:
    made = job_record("failed: %s", "ValueError: boom\n\nTraceback ...", level=logging.WARNING)
    text = formatter_for("text", journal=False).format(made)
    assert text.endswith(" WARNING poolsup.test-job-log: [thumb-1] failed: ValueError: boom "
                         "(token 7)\n\nTraceback ...")
    assert formatter_for("text", journal=True).format(made) == (
        "<4>WARNING poolsup.test-job-log: [thumb-1] failed: ValueError: boom (token 7)\n<4>\n"
        "<4>Traceback ..."
    )


def test_a_line_that_only_looks_like_a_jobs_is_not_read_as_one() -> None:
    """Key and token come from the record's fields, never from the message's text."""
    line = as_json(record("[k-2] released (token 8): drain"))
    assert "key" not in line and "token" not in line


def test_key_and_token_given_as_extra_are_carried() -> None:
    line = as_json(record("[%s] %s", "k-3", "a line the handler printed", key="k-3", token=9))
    assert (line["key"], line["token"]) == ("k-3", 9)
    assert line["message"] == "[k-3] a line the handler printed"


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
    made = job_record("succeeded", key="k", token=3, level=logging.WARNING)
    assert formatter_for("text", journal=False).format(made).endswith(
        " WARNING poolsup.test-job-log: [k] succeeded (token 3)"
    )
    assert formatter_for("text", journal=False).format(made)[:2] == "20"
    assert formatter_for("text", journal=True).format(made) == (
        "<4>WARNING poolsup.test-job-log: [k] succeeded (token 3)"
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
