"""attnkit.viz.AttentionView: the self-contained interactive page, in Python and in Chromium.

The page's data is decoded back from the HTML and compared with the weights (8-bit
quantization: at most 1/510 of each head's maximum off). The page itself runs in real
headless Chromium (Debian's ``chromium`` and ``chromium-driver``), driven by selenium:
it draws something, a different head draws something else, hovering highlights, a
512-token page draws in both views, and no network request is made (a control page
with an external image shows that the check sees requests).
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import json
import re
import shutil
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import attnkit as ak
from attnkit import viz

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
N, H, L = 2, 3, 6
TOKENS = ["[CLS]", "a", "</script><b>x</b>", "cat", "sat", "[SEP]"]


def softmax_weights(shape: tuple[int, ...], seed: int) -> np.ndarray:
    scores = np.random.default_rng(seed).standard_normal(shape) * 2.0
    e = np.exp(scores - scores.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def payload(page: str) -> dict[str, Any]:
    match = re.search(r'<script type="application/json" id="ak-data">(.*?)</script>', page, re.S)
    assert match, "the page has no data element"
    return json.loads(match.group(1))


def decode(entry: dict[str, Any], encoding: str, L: int, S: int) -> np.ndarray:
    raw = base64.b64decode(entry["data"])
    if encoding == "u8-deflate":
        raw = zlib.decompress(raw)
    codes = np.frombuffer(raw, dtype=np.uint8).reshape(len(entry["heads"]), L, S)
    return codes / 255.0 * np.asarray(entry["scales"])[:, None, None]


@pytest.mark.parametrize("compress", [True, False])
def test_page_data_round_trips(compress: bool) -> None:
    w = softmax_weights((N, H, L, L), seed=1)
    page = viz.to_html(w, TOKENS, compress=compress)
    data = payload(page)
    assert data["queries"] == TOKENS and data["keys"] == TOKENS
    assert [e["name"] for e in data["layers"]] == ["layer 0", "layer 1", "rollout"]
    for n in range(N):
        got = decode(data["layers"][n], data["encoding"], L, L)
        allowed = w[n].max(axis=(-2, -1), keepdims=True) / 510 + 1e-12
        assert np.all(np.abs(got - w[n]) <= allowed), f"layer {n} decoded wrongly"
    rollout = viz.rollout(w, all_layers=True)
    got = decode(data["layers"][N], data["encoding"], L, L)
    assert np.max(np.abs(got - rollout)) <= rollout.max() / 510 + 1e-12


def test_page_is_self_contained_and_escaped() -> None:
    page = viz.to_html(softmax_weights((N, H, L, L), seed=2), TOKENS, title="<T&>")
    assert "<title>&lt;T&amp;&gt;</title>" in page
    assert page.count("</script>") == 2  # the data and the code: no token closes them
    for pattern in (r"https?://", r"\ssrc=", r"<link", r"@import", r"url\("):
        assert not re.search(pattern, page), f"the page references something outside: {pattern}"
    assert "default-src 'none'" in page  # and a CSP forbids it anyway


def test_view_options_and_errors() -> None:
    w = softmax_weights((N, H, L, 4), seed=3)  # L != S: no rollout
    view = viz.AttentionView(w, TOKENS, key_tokens=list("wxyz"), layer=1, head="max")
    data = payload(view.to_html())
    assert len(data["layers"]) == N and data["initial"]["head"] == "max"
    assert data["keys"] == list("wxyz")
    one_head = payload(viz.to_html(w[0, 0]))  # (L, S) works: one layer, one head
    assert len(one_head["layers"]) == 1 and one_head["layers"][0]["heads"] == ["head 0"]
    with pytest.raises(ak.ShapeError, match="L == S"):
        viz.AttentionView(w, rollout=True)
    with pytest.raises(ak.ParameterError, match=r"layer must be an int in 0\.\.1"):
        viz.AttentionView(w, layer=2)
    with pytest.raises(ak.ParameterError, match=r"0\.\.2 or one of 'mean', 'max', 'all'"):
        viz.AttentionView(w, head=3)
    with pytest.raises(ak.ParameterError, match="view must be one of"):
        viz.AttentionView(w, view="chord")
    with pytest.raises(ak.ShapeError, match="key_tokens has 3 entries"):
        viz.AttentionView(w, TOKENS, key_tokens=list("xyz"))


def test_repr_html_is_an_isolated_iframe(tmp_path: Path) -> None:
    view = viz.AttentionView(softmax_weights((1, 2, 4, 4), seed=4))
    frame = view._repr_html_()
    assert frame.startswith("<iframe srcdoc=") and "<script" not in frame
    inner = html.unescape(re.search(r'srcdoc="(.*?)"', frame, re.S).group(1))
    assert inner == view.to_html()
    assert viz.save(view, tmp_path / "v.html").read_text(encoding="utf-8") == view.to_html()


# ---- in Chromium -----------------------------------------------------------------------


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


def open_page(browser: Any, path: Path, renders: int = 1) -> None:
    browser.get_log("performance")  # drop what earlier pages logged
    browser.get_log("browser")
    browser.get(path.resolve().as_uri())
    wait_renders(browser, renders)


def wait_renders(browser: Any, count: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = browser.execute_script(
            "const r = document.getElementById('ak-root');"
            "return [r.dataset.renders || '0', r.dataset.state];"
        )
        if state[1] == "error":
            raise AssertionError(browser.find_element("id", "ak-info").text)
        if int(state[0]) >= count and state[1].startswith("drawn"):
            return
        time.sleep(0.05)
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


def select(browser: Any, element: str, value: str, renders: int) -> None:
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element("id", element)).select_by_value(value)
    wait_renders(browser, renders)


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


def test_page_draws_and_reacts_in_chromium(browser: Any, tmp_path: Path) -> None:
    path = viz.AttentionView(softmax_weights((N, H, L, L), seed=5), TOKENS).save(
        tmp_path / "view.html"
    )
    open_page(browser, path)
    assert screenshot_variance(browser) > 5, "the page looks blank"
    first, colours = canvas_digest(browser)
    assert colours > 10, f"the canvas has {colours} colours: nothing drawn"
    assert not severe_logs(browser)

    select(browser, "ak-head", "2", renders=2)
    other_head, _ = canvas_digest(browser)
    assert other_head != first, "selecting another head drew the same picture"
    select(browser, "ak-head", "all", renders=3)
    assert canvas_digest(browser)[0] not in (first, other_head)
    select(browser, "ak-view", "heatmap", renders=4)
    heat, colours = canvas_digest(browser)
    assert colours > 10 and heat != other_head
    select(browser, "ak-layer", str(N), renders=5)  # the rollout
    assert canvas_digest(browser)[0] != heat
    assert browser.find_element("id", "ak-head").get_attribute("value") == "0"

    from selenium.webdriver.common.action_chains import ActionChains

    info = browser.find_element("id", "ak-info")
    before = info.text
    canvas = browser.find_element("id", "ak-canvas")
    ActionChains(browser).move_to_element(canvas).perform()  # the centre: a cell
    assert info.text != before and "query" in info.text and "key" in info.text, info.text
    assert not severe_logs(browser)
    assert requested_urls(browser) == [path.resolve().as_uri()], "a request beyond the file"


def test_no_network_request(browser: Any, tmp_path: Path) -> None:
    path = viz.AttentionView(softmax_weights((N, H, L, L), seed=6), TOKENS).save(
        tmp_path / "view.html"
    )
    open_page(browser, path)
    select(browser, "ak-view", "heatmap", renders=2)
    time.sleep(0.5)  # anything the page would fetch late
    assert requested_urls(browser) == [path.resolve().as_uri()]


def test_network_check_sees_requests(browser: Any, tmp_path: Path) -> None:
    # The control: a page that does reference something outside (a closed local port).
    control = tmp_path / "control.html"
    control.write_text('<img src="http://127.0.0.1:9/x.png"><p>x</p>', encoding="utf-8")
    browser.get_log("performance")
    browser.get(control.as_uri())
    time.sleep(0.5)
    assert "http://127.0.0.1:9/x.png" in requested_urls(browser)


def test_page_with_512_tokens(browser: Any, tmp_path: Path) -> None:
    n = 520
    w = softmax_weights((2, 2, n, n), seed=7).astype(np.float32)
    tokens = [f"t{i}" for i in range(n)]
    path = viz.AttentionView(w, tokens, head=1).save(tmp_path / "long.html")
    start = time.monotonic()
    open_page(browser, path)
    lines_s = time.monotonic() - start
    first, colours = canvas_digest(browser)
    assert colours > 10
    start = time.monotonic()
    select(browser, "ak-view", "heatmap", renders=2)
    heat_s = time.monotonic() - start
    heat, colours = canvas_digest(browser)
    assert colours > 10 and heat != first
    select(browser, "ak-head", "0", renders=3)
    assert canvas_digest(browser)[0] != heat
    # Interactive means seconds, not minutes (2 shared cores, software rendering).
    assert lines_s < 15 and heat_s < 10, f"lines {lines_s:.1f} s, heatmap {heat_s:.1f} s"
    assert not severe_logs(browser)
