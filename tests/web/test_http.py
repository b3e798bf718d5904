"""`poolsup web` over HTTP, with a real supervisor and Redis: the token, CSRF, read-only,
escaping, the paged listing, and the actions doing what the CLI's do."""

from __future__ import annotations

import html
from collections.abc import Iterator
from pathlib import Path

import pytest
from markupsafe import escape

from supervisor.client import AsyncClient
from tests.helpers.pool import wait_for
from tests.web.conftest import WebPool
from tests.web.dashboard import Dashboard, csrf_of, page_forms, wait_state

TOKEN = "s3cret-token-for-tests"
NASTY_KEY = "<script>alert('key')</script>"
NASTY_ERROR = "<script>alert('error')</script> & <b>bold</b>"


@pytest.fixture(scope="module")
def dashboard(web_pool: WebPool, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    token_file = tmp_path_factory.mktemp("token") / "token"
    token_file.write_text(TOKEN + "\n")
    running = Dashboard(web_pool.config, ("--token-file", str(token_file))).start()
    yield running
    assert running.stop() == 0


@pytest.fixture(scope="module")
def read_only(web_pool: WebPool) -> Iterator[Dashboard]:
    running = Dashboard(web_pool.config, ("--read-only",)).start()
    yield running
    assert running.stop() == 0


def test_every_request_needs_the_token(dashboard: Dashboard) -> None:
    with dashboard.session() as anonymous:
        assert anonymous.get("/").status_code == 401
        assert anonymous.get("/jobs").status_code == 401
        assert anonymous.get("/parts/overview").status_code == 401
        assert anonymous.get("/static/htmx.min.js").status_code == 401
        assert anonymous.post("/pause", data={"handler": "worker"}).status_code == 401
    with dashboard.session("wrong") as wrong:
        assert wrong.get("/").status_code == 403
    with dashboard.session(TOKEN) as bearer:
        assert bearer.get("/").status_code == 200


def test_a_token_in_the_url_becomes_a_strict_httponly_cookie(dashboard: Dashboard) -> None:
    with dashboard.session() as browser:
        answer = browser.get("/jobs", params={"token": TOKEN, "state": "failed"})
        assert answer.status_code == 303
        assert answer.headers["location"] == "/jobs?state=failed"
        cookie = next(value for value in answer.headers.get_list("set-cookie")
                      if value.startswith("poolsup_token="))
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert browser.get("/jobs?state=failed").status_code == 200
        assert browser.get("/", params={"token": "wrong"}).status_code == 403


def test_actions_need_the_csrf_value_of_the_session(dashboard: Dashboard,
                                                    web_pool: WebPool) -> None:
    with dashboard.session(TOKEN) as browser:
        csrf = csrf_of(browser)
        assert browser.post("/pause", data={"handler": "worker"}).status_code == 403
        assert browser.post("/pause", data={"handler": "worker", "csrf": "x" * 43}
                            ).status_code == 403
        assert web_pool.client.status()["paused"]["handlers"] == ["bulk"]

        answer = browser.post("/pause", data={"handler": "worker", "csrf": csrf})
        assert answer.status_code == 303
        assert sorted(web_pool.client.status()["paused"]["handlers"]) == ["bulk", "worker"]
        assert "paused worker" in browser.get(answer.headers["location"]).text

        assert browser.post("/resume", data={"handler": "worker", "csrf": csrf}
                            ).status_code == 303
        assert web_pool.client.status()["paused"]["handlers"] == ["bulk"]
    with dashboard.session(TOKEN) as other:  # another browser: another value
        other.get("/")
        assert other.post("/pause", data={"handler": "worker", "csrf": csrf}).status_code == 403


def test_stop_retry_and_notify_do_what_the_cli_does(dashboard: Dashboard,
                                                    web_pool: WebPool) -> None:
    client = web_pool.client
    client.dispatch("act-1", {"n": 1}, handler="worker")
    wait_state(client, "act-1", "running")
    with dashboard.session(TOKEN) as browser:
        csrf = csrf_of(browser, "/jobs/act-1")
        bad = browser.post("/jobs/act-1/notify", data={"payload": "{oops", "csrf": csrf})
        assert bad.status_code == 303
        shown = browser.get(bad.headers["location"]).text
        assert "payload is not valid JSON" in shown

        good = browser.post("/jobs/act-1/notify", data={"payload": '{"go": 1}', "csrf": csrf})
        assert "notified act-1" in browser.get(good.headers["location"]).text

        stop = browser.post("/jobs/act-1/stop", data={"csrf": csrf})
        assert stop.status_code == 303 and stop.headers["location"] == "/jobs/act-1?note=" \
            "stop+requested%3A+act-1+is+running"
        wait_state(client, "act-1", "stopped")
        page = browser.get("/jobs/act-1").text
        assert 'id="retry-button"' in page and 'id="stop-button"' not in page

        assert browser.post("/jobs/act-1/retry", data={"csrf": csrf}).status_code == 303
        wait_state(client, "act-1", "running")
        assert client.job("act-1")["attempts"] == 1
        client.stop("act-1")


def test_the_read_only_dashboard_has_no_buttons_and_refuses_actions(
        read_only: Dashboard, web_pool: WebPool) -> None:
    client = web_pool.client
    client.dispatch("ro-1", {}, handler="worker")
    wait_state(client, "ro-1", "running")
    with read_only.session() as browser:
        for path in ("/", "/jobs/ro-1", "/jobs"):
            page = browser.get(path)
            assert page.status_code == 200
            assert page_forms(page.text).buttons == (1 if path == "/jobs" else 0), path
        csrf = browser.cookies["poolsup_csrf"]
        for path in ("/jobs/ro-1/stop", "/pause", "/resume", "/jobs/ro-1/notify"):
            answer = browser.post(path, data={"csrf": csrf, "payload": "{}"})
            assert answer.status_code == 403, path
    assert client.job("ro-1")["state"] == "running"
    client.stop("ro-1")


def test_without_a_token_only_loopback_host_names_are_answered(read_only: Dashboard) -> None:
    with read_only.session() as browser:
        assert browser.get("/", headers={"host": "localhost"}).status_code == 200
        refused = browser.get("/", headers={"host": "attacker.example:8080"})
        assert refused.status_code == 403


def test_keys_and_errors_render_as_text(dashboard: Dashboard, web_pool: WebPool) -> None:
    client = web_pool.client
    client.dispatch(NASTY_KEY, {"message": NASTY_ERROR}, handler="broken")
    wait_state(client, NASTY_KEY, "failed")
    with dashboard.session(TOKEN) as browser:
        from supervisor.web.views import job_path
        for path in ("/", "/jobs?state=failed", job_path(NASTY_KEY)):
            page = browser.get(path)
            assert page.status_code == 200, path
            assert "<script>alert" not in page.text, path
            assert "<b>bold</b>" not in page.text, path
            assert str(escape(NASTY_KEY)) in page.text, path
        assert str(escape(NASTY_ERROR)) in browser.get(job_path(NASTY_KEY)).text


def test_the_listing_is_paged_by_key_with_a_prefix_search(dashboard: Dashboard,
                                                          web_pool: WebPool) -> None:
    keys = [f"bulk-{n:05d}" for n in range(2500)]
    web_pool.client.dispatch_many(
        [{"key": key, "handler": "bulk"} for key in reversed(keys)]
        + [{"key": f"bulkier-{n}", "handler": "bulk"} for n in range(10)])
    seen: list[str] = []
    with dashboard.session(TOKEN) as browser:
        path: str | None = "/jobs?state=pending&prefix=bulk-"
        pages = 0
        while path is not None:
            page = browser.get(path)
            assert page.status_code == 200
            rows = _row_keys(page.text)
            assert 0 < len(rows) <= 50
            seen += rows
            pages += 1
            path = _next_link(page.text)
        assert seen == keys
        assert pages == 50
        assert _row_keys(browser.get("/jobs?prefix=bulkier-").text) == sorted(
            f"bulkier-{n}" for n in range(10))
        assert browser.get("/jobs?state=nonsense").status_code == 400


@pytest.mark.skipif(not hasattr(AsyncClient, "logs"),
                    reason="AsyncClient.logs (poolsup logs, branch logs2) is not in this tree yet")
def test_the_job_page_shows_what_the_job_printed(dashboard: Dashboard,
                                                 web_pool: WebPool) -> None:
    client = web_pool.client
    client.dispatch("out-1", {}, handler="worker")
    wait_state(client, "out-1", "running")
    printed = str(escape("working on out-1 <b>not bold</b>"))
    with dashboard.session(TOKEN) as browser:
        wait_for(lambda: printed in browser.get("/jobs/out-1").text, 20,
                 message="the job's output on its page")
        assert "<b>not bold</b>" not in browser.get("/parts/jobs/out-1").text
    client.stop("out-1")


def test_the_job_page_counts_the_snoozes(dashboard: Dashboard, web_pool: WebPool) -> None:
    client = web_pool.client
    client.dispatch("snoozy", {"seconds": 600}, handler="snoozer")
    wait_for(lambda: client.job("snoozy")["snoozes"] == 1, 20, message="the job to snooze")
    with dashboard.session(TOKEN) as browser:
        page = browser.get("/jobs/snoozy").text
    assert "snoozed 1 time" in page and "snoozed 1 times" not in page
    client.stop("snoozy")


def test_an_unknown_job_is_a_404_with_one_line(dashboard: Dashboard) -> None:
    with dashboard.session(TOKEN) as browser:
        page = browser.get("/jobs/no-such-key")
        assert page.status_code == 404
        assert "no live or retained job has the key &#39;no-such-key&#39;" in page.text


def test_sigterm_ends_the_dashboard_with_exit_0(web_pool: WebPool) -> None:
    running = Dashboard(web_pool.config).start()
    with running.session() as browser:
        assert browser.get("/").status_code == 200
    assert running.stop() == 0


def _row_keys(text: str) -> list[str]:
    import re
    return [html.unescape(key) for key in re.findall(r'class="job-row" data-key="([^"]*)"', text)]


def _next_link(text: str) -> str | None:
    import re
    found = re.search(r'<a href="([^"]*)" id="next-page"', text)
    return html.unescape(found.group(1)) if found else None


def test_job_page_path_keeps_slashes(dashboard: Dashboard, web_pool: WebPool,
                                     tmp_path: Path) -> None:
    web_pool.client.dispatch("dir/with/stop", {}, handler="bulk")
    with dashboard.session(TOKEN) as browser:
        page = browser.get("/jobs/dir%2Fwith%2Fstop")
        assert page.status_code == 200
        assert 'id="job-key">dir/with/stop<' in page.text
        csrf = csrf_of(browser, "/jobs/dir%2Fwith%2Fstop")
        assert browser.post("/jobs/dir%2Fwith%2Fstop/stop", data={"csrf": csrf}
                            ).status_code == 303
    assert web_pool.client.job("dir/with/stop")["state"] == "stopped"


def test_the_blocking_client_pages_too(web_pool: WebPool) -> None:
    client = web_pool.client
    client.dispatch("zz-page-1", {}, handler="bulk")
    client.dispatch("zz-page-2", {}, handler="bulk")
    assert [r["key"] for r in client.jobs_page("pending", prefix="zz-page-")] == [
        "zz-page-1", "zz-page-2"]
    assert [r["key"] for r in client.jobs_page(prefix="zz-page-", after="zz-page-1")] == [
        "zz-page-2"]
    assert all(r["state"] == "failed" for r in client.latest_finished("failed", 5))
