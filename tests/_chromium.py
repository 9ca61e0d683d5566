"""Headless Chromium for the interactive page's tests (Debian's chromium, chromium-driver).

``browser`` is a module-scoped pytest fixture (import it into a test module); the helpers
open a page and wait for its drawings (``#ak-root``'s ``data-state`` and
``data-renders``), hash the canvas, list the network requests made (Chrome's performance
log) and the console's severe messages.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

__all__ = [
    "browser",
    "canvas_digest",
    "open_page",
    "page_state",
    "requested_urls",
    "screenshot_variance",
    "select",
    "severe_logs",
    "wait_renders",
]

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).exists() and not shutil.which(Path(path).name):
            pytest.skip(f"{path} is not installed (apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="drives Chromium")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1200,900",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.get("about:blank")  # leave the start page, which loads the browser's own UI
    time.sleep(0.5)
    driver.get_log("performance")
    try:
        yield driver
    finally:
        driver.quit()


def page_state(browser: Any) -> tuple[int, str]:
    """(how many drawings, the state line: "drawn <sentence> <view> ...")."""
    renders, state = browser.execute_script(
        "const r = document.getElementById('ak-root');"
        "return [r.dataset.renders || '0', r.dataset.state];"
    )
    return int(renders), state


def open_page(browser: Any, path: Path, renders: int = 1, timeout: float = 30.0) -> None:
    browser.get_log("performance")  # drop what earlier pages logged
    browser.get_log("browser")
    browser.get(path.resolve().as_uri())
    wait_renders(browser, renders, timeout)


def wait_renders(browser: Any, count: int, timeout: float = 30.0) -> str:
    """Wait until the page has drawn ``count`` times; returns its state line."""
    deadline = time.monotonic() + timeout
    state = (0, "")
    while time.monotonic() < deadline:
        state = page_state(browser)
        if state[1] == "error":
            raise AssertionError(browser.find_element("id", "ak-info").text)
        if state[0] >= count and state[1].startswith("drawn"):
            return state[1]
        time.sleep(0.02)
    raise AssertionError(f"the page did not finish drawing ({state}) in {timeout} s")


def canvas_digest(browser: Any) -> tuple[str, int]:
    """(a hash of the canvas pixels, how many distinct colours it has)."""
    data = browser.execute_script(
        "const c = document.getElementById('ak-canvas');"
        "const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
        "const seen = new Set(); let h = 0;"
        "for (let i = 0; i < d.length; i += 4) {"
        "  const v = (d[i] << 24) ^ (d[i+1] << 16) ^ (d[i+2] << 8) ^ d[i+3];"
        "  seen.add(v); h = (Math.imul(h, 31) + v) | 0; }"
        "return [String(h), seen.size, c.width, c.height];"
    )
    return hashlib.sha256(str(data).encode()).hexdigest(), int(data[1])


def select(browser: Any, element: str, value: str, renders: int) -> str:
    """Choose ``value`` in the select ``element`` and wait for the drawing it causes."""
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element("id", element)).select_by_value(value)
    return wait_renders(browser, renders)


def requested_urls(browser: Any) -> list[str]:
    """Every URL requested since the last call, except by the browser's own chrome:// pages."""
    urls = []
    for entry in browser.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        params = message["params"]
        if message["method"] == "Network.requestWillBeSent":
            if not params.get("documentURL", "").startswith("chrome://"):
                urls.append(params["request"]["url"])
    return urls


def screenshot_variance(browser: Any) -> float:
    image = pytest.importorskip("PIL.Image").open(io.BytesIO(browser.get_screenshot_as_png()))
    return float(np.asarray(image.convert("L"), dtype=np.float64).std())


def severe_logs(browser: Any) -> list[str]:
    return [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
