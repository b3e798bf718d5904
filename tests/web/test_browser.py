"""The dashboard in a real browser (Debian's Chromium, headless, through Selenium): the
overview and a job's page load without console errors, show running and failed jobs,
and follow a stop live, without reloading the page.

With POOLSUP_SCREENSHOTS=DIR it also saves dashboard-overview.png and dashboard-job.png
there (the README's, in docs/images)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from supervisor.client import AsyncClient
from tests.web.conftest import WebPool
from tests.web.dashboard import Dashboard, wait_state

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
TOKEN = "browser-token"
WAIT = 20.0

if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
    pytest.skip(f"no {CHROMIUM} and {CHROMEDRIVER} (apt-get install chromium chromium-driver)",
                allow_module_level=True)

from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import (  # noqa: E402
    NoSuchElementException,
    StaleElementReferenceException,
)
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def dashboard(web_pool: WebPool) -> Iterator[Dashboard]:
    running = Dashboard(web_pool.config, env={"POOLSUP_WEB_TOKEN": TOKEN}).start()
    yield running
    assert running.stop() == 0


@pytest.fixture(scope="module")
def browser(dashboard: Dashboard) -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--window-size=1280,800"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(CHROMEDRIVER))
    try:
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False})
        driver.get(f"{dashboard.url}/?token={TOKEN}")  # once: it becomes a cookie
        yield driver
    finally:
        driver.quit()


def _until(driver: Any, what: str, check: Any) -> Any:
    # The live refresh replaces rows: an element found a moment ago may be gone when read.
    wait = WebDriverWait(driver, WAIT, ignored_exceptions=(NoSuchElementException,
                                                          StaleElementReferenceException))
    return wait.until(lambda d: check(d), message=what)


def _text(driver: Any, element_id: str) -> str:
    """The element's text, read again if the live refresh replaced it while it was read."""
    found: tuple[str] = _until(driver, f"#{element_id}'s text",
                               lambda d: (d.find_element(By.ID, element_id).text,))
    return found[0]


def _severe_console_entries(driver: Any) -> list[dict[str, Any]]:
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def _mark_page(driver: Any) -> None:
    """A value that lives only as long as this page: a reload loses it."""
    driver.execute_script("window.poolsupTestMark = 'same page';")


def _same_page(driver: Any) -> bool:
    return bool(driver.execute_script("return window.poolsupTestMark === 'same page';"))


def _row_keys(driver: Any, css: str) -> list[str]:
    return [row.get_attribute("data-key") for row in driver.find_elements(By.CSS_SELECTOR, css)]


def test_the_overview_shows_running_and_failed_jobs_live(
        browser: Any, dashboard: Dashboard, web_pool: WebPool) -> None:
    client = web_pool.client
    for n in (1, 2, 3):
        client.dispatch(f"render-{n}", {"frame": n}, handler="worker")
    client.dispatch("import-7", {"message": "disk full: /srv/media"}, handler="broken")
    client.dispatch("import-8", {"message": "bad input: width must be > 0"}, handler="broken")
    for key in ("render-1", "render-2", "render-3"):
        wait_state(client, key, "running")
    wait_state(client, "import-7", "failed")
    wait_state(client, "import-8", "failed")

    browser.get(f"{dashboard.url}/")
    _until(browser, "three running jobs",
           lambda d: {"render-1", "render-2", "render-3"} <= set(_row_keys(d, "tr.running-job")))
    _until(browser, "import-7's error", lambda d: "disk full: /srv/media" in d.find_element(
        By.CSS_SELECTOR, 'tr.failed-job[data-key="import-7"]').text)
    for section in ("store", "supervisors", "running", "failed", "pauses", "schedules"):
        assert browser.find_element(By.ID, section).is_displayed(), section
    assert "web-sup-1" in _text(browser, "supervisors")

    _mark_page(browser)
    client.dispatch("render-4", {"frame": 4}, handler="worker")
    _until(browser, "render-4 to appear without a reload",
           lambda d: "render-4" in _row_keys(d, "tr.running-job"))
    assert _same_page(browser)
    _save_screenshot(browser, "dashboard-overview.png")
    assert _severe_console_entries(browser) == []


def test_stop_on_the_job_page_is_followed_live_to_stopped(
        browser: Any, dashboard: Dashboard, web_pool: WebPool) -> None:
    client = web_pool.client
    client.dispatch("render-9", {"frame": 9}, handler="worker")
    wait_state(client, "render-9", "running")
    client.notify("render-9", {"priority": "high"})

    browser.get(f"{dashboard.url}/jobs/render-9")
    assert _text(browser, "job-state") == "running"
    for section in ("payload", "events", "checkpoint", "output", "notify"):
        assert browser.find_element(By.ID, section).is_displayed(), section
    if hasattr(AsyncClient, "logs"):  # poolsup logs: the run's output, live
        _until(browser, "the job's output", lambda d: "working on render-9" in " ".join(
            pre.text for pre in d.find_elements(By.CSS_SELECTOR, "pre.output")))
    _save_screenshot(browser, "dashboard-job.png")

    browser.find_element(By.ID, "stop-button").click()
    _until(browser, "the stop's note", lambda d: d.find_elements(By.ID, "note"))
    assert "stop requested" in _text(browser, "note")
    assert _text(browser, "job-state") == "running"  # it stops slowly
    _mark_page(browser)
    _until(browser, "the job to show stopped",
           lambda d: d.find_element(By.ID, "job-state").text == "stopped")
    assert _same_page(browser), "the page was reloaded: the live refresh did not show it"
    assert client.job("render-9")["state"] == "stopped"
    assert browser.find_elements(By.ID, "retry-button")
    assert not browser.find_elements(By.ID, "stop-button")
    assert _severe_console_entries(browser) == []


def test_a_failed_jobs_page_shows_its_error(browser: Any, dashboard: Dashboard,
                                            web_pool: WebPool) -> None:
    client = web_pool.client
    client.dispatch("import-9", {"message": "<img src=x onerror=alert(1)> no such file"},
                    handler="broken")
    wait_state(client, "import-9", "failed")
    browser.get(f"{dashboard.url}/jobs/import-9")
    error = _text(browser, "job-error")
    assert "<img src=x onerror=alert(1)> no such file" in error
    assert _text(browser, "job-state") == "failed"
    assert not browser.find_elements(By.CSS_SELECTOR, "#error img")
    assert _severe_console_entries(browser) == []


def _save_screenshot(browser: Any, name: str) -> None:
    directory = os.environ.get("POOLSUP_SCREENSHOTS")
    if directory:
        Path(directory).mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(Path(directory) / name))
