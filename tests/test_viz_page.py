"""The interactive page in real headless Chromium (selenium): every view draws, the controls,
legend, keyboard and clicks work, colour bars are there, and nothing leaves the file.

Each check reads the page's own state line (``#ak-root[data-state]``: what is drawn), the
canvas pixels (a hash and the number of colours: something was drawn, and a change drew
something else), the DOM of the legend and the colour bars, the console (no error) and
Chrome's network log (no request but the file itself; a control page shows the check sees
requests).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _chromium import (  # the browser fixture: tests/conftest.py
    canvas_digest,
    open_page,
    page_state,
    requested_urls,
    screenshot_variance,
    select,
    severe_logs,
    wait_renders,
)

from attnkit import viz

N, H, L, E = 2, 3, 6, 8
TOKENS = ["[CLS]", "a", "</script><b>x</b>", "cat", "sat", "[SEP]"]


def softmax_weights(shape: tuple[int, ...], seed: int) -> np.ndarray:
    scores = np.random.default_rng(seed).standard_normal(shape) * 2.0
    e = np.exp(scores - scores.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def vectors(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((N, H, L, E)), rng.standard_normal((N, 1, L, E))


def page(tmp_path: Path, name: str = "view.html", **options: Any) -> tuple[Path, Any]:
    q, k = vectors(9)
    w = softmax_weights((N, H, L, L), seed=5)
    view = viz.AttentionView(w, TOKENS, queries=q, keys=k, **options)
    return view.save(tmp_path / name), (w, q, k)


def colour_bars(browser: Any) -> list[dict[str, Any]]:
    return browser.execute_script(
        "return Array.from(document.querySelectorAll('#ak-colorbar .ak-bar'), (b) => ({"
        "  kind: b.dataset.kind, label: b.firstChild.textContent,"
        "  ticks: Array.from(b.querySelectorAll('.ticks span'), (s) => s.textContent),"
        "  canvas: b.querySelector('canvas') !== null}));"
    )


def legend(browser: Any) -> list[tuple[str, str]]:
    """(data-head, aria-pressed) of the legend's buttons, when the legend shows."""
    pairs = browser.execute_script(
        "const l = document.getElementById('ak-legend');"
        "if (l.classList.contains('hidden')) return [];"
        "return Array.from(l.querySelectorAll('button'), (b) =>"
        "  [b.dataset.head, b.getAttribute('aria-pressed')]);"
    )
    return [tuple(p) for p in pairs]


def press(browser: Any, keys: str, renders: int) -> str:
    from selenium.webdriver.common.action_chains import ActionChains

    browser.execute_script("document.getElementById('ak-canvas').focus()")  # not a <select>
    ActionChains(browser).send_keys(keys).perform()
    return wait_renders(browser, renders)


def test_every_view_draws_with_its_colour_bar(browser: Any, tmp_path: Path) -> None:
    path, _ = page(tmp_path)
    open_page(browser, path)
    assert screenshot_variance(browser) > 5, "the page looks blank"
    seen = {}
    for count, view in enumerate(["head", "heatmap", "model", "neuron", "rollout", "flow"], 1):
        if count > 1:
            state = select(browser, "ak-view", view, renders=count)
        else:
            state = page_state(browser)[1]
        assert state.startswith(f"drawn 0 {view}"), state
        digest, colours = canvas_digest(browser)
        assert colours > 10, f"{view}: the canvas has {colours} colours: nothing drawn"
        assert digest not in seen.values(), f"{view} drew the same picture as another view"
        seen[view] = digest
        bars = colour_bars(browser)
        assert bars and all(b["canvas"] and len(b["ticks"]) >= 3 for b in bars), (view, bars)
        assert all(re.fullmatch(r"-?[0-9.e+-]+", t) for b in bars for t in b["ticks"]), bars
        if view in ("head", "heatmap", "neuron"):
            heads = [h for h, _ in legend(browser)]
            assert heads[:H] == [str(h) for h in range(H)], f"{view}: legend {heads}"
        else:
            assert legend(browser) == [], f"{view} shows a head legend"
    kinds = {b["kind"] for b in colour_bars(browser)}
    assert kinds == {"ramp"}
    select(browser, "ak-view", "neuron", renders=7)
    assert len(colour_bars(browser)) == 3  # q, k and their product: one bar per scale
    assert not severe_logs(browser)
    assert requested_urls(browser) == [path.resolve().as_uri()], "a request beyond the file"


def test_head_subsets_from_the_legend(browser: Any, tmp_path: Path) -> None:
    path, _ = page(tmp_path)
    open_page(browser, path)
    one, _ = canvas_digest(browser)
    assert legend(browser)[:H] == [("0", "true"), ("1", "false"), ("2", "false")]
    browser.find_element("css selector", "#ak-legend button[data-head='2']").click()
    assert wait_renders(browser, 2).endswith("head 0 0,2"), page_state(browser)
    two, _ = canvas_digest(browser)
    assert two != one and legend(browser)[:H] == [("0", "true"), ("1", "false"), ("2", "true")]
    assert browser.find_element("id", "ak-combine").is_displayed()  # several heads: combine
    select(browser, "ak-combine", "mean", renders=3)
    assert canvas_digest(browser)[0] not in (one, two)
    assert "attention weight" in colour_bars(browser)[0]["label"]
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    button = browser.find_element("css selector", "#ak-legend button[data-head='1']")
    ActionChains(browser).key_down(Keys.SHIFT).click(button).key_up(Keys.SHIFT).perform()
    assert wait_renders(browser, 4).endswith("head 0 1")  # shift-click: that head alone
    browser.find_element("css selector", "#ak-legend button[data-head='none']").click()
    assert wait_renders(browser, 5).endswith("none")
    assert "No head selected" in browser.find_element("id", "ak-info").text
    browser.find_element("css selector", "#ak-legend button[data-head='all']").click()
    assert wait_renders(browser, 6).endswith("head 0 0,1,2")
    assert "attention weight" in colour_bars(browser)[0]["label"]  # still combined by mean
    select(browser, "ak-combine", "colour", renders=7)
    assert "strongest head" in colour_bars(browser)[0]["label"]
    # the neuron view shows one head: the first of the selection, and the legend says so
    assert select(browser, "ak-view", "neuron", renders=8).endswith("neuron 0 0")
    assert [p for _, p in legend(browser)[:H]] == ["true", "false", "false"]
    assert not severe_logs(browser)


def test_model_view_click_and_keys_open_a_head(browser: Any, tmp_path: Path) -> None:
    path, _ = page(tmp_path, view="model")
    open_page(browser, path)
    assert page_state(browser)[1] == "drawn 0 model"
    width = browser.execute_script("return window.innerWidth")
    room = max(400, min(1400, width - 60))
    thumb = max(24, min(96, (room - 70) // H - 6))
    canvas = browser.find_element("id", "ak-canvas")
    from selenium.webdriver.common.action_chains import ActionChains

    # The centre of layer 1, head 2's thumbnail (page_model.js: left 64, top 20, gap 6),
    # as an offset from the canvas centre.
    size = canvas.size
    x = 64 + 2 * (thumb + 6) + thumb / 2 - size["width"] / 2
    y = 20 + 1 * (thumb + 6) + thumb / 2 - size["height"] / 2
    ActionChains(browser).move_to_element_with_offset(canvas, int(x), int(y)).perform()
    assert "layer 1, head 2" in browser.find_element("id", "ak-info").text
    ActionChains(browser).click().perform()
    assert wait_renders(browser, 2) == "drawn 0 head 1 2"
    assert browser.find_element("id", "ak-layer").get_attribute("value") == "1"
    press(browser, "3", renders=3)  # back to the model view, then the keyboard
    from selenium.webdriver.common.keys import Keys

    ActionChains(browser).send_keys(Keys.ARROW_RIGHT, Keys.ARROW_DOWN, Keys.ENTER).perform()
    # the focus followed the mouse to (1, 2); right wraps to head 0, down wraps to layer 0
    assert wait_renders(browser, 4) == "drawn 0 head 0 0"
    assert not severe_logs(browser)


def test_keyboard_navigation(browser: Any, tmp_path: Path) -> None:
    a = softmax_weights((N, H, 4, 4), seed=1)
    q, k = vectors(3)
    view = viz.AttentionView.batch(
        [
            {"weights": a, "tokens": list("abcd")},
            {"weights": softmax_weights((N, H, L, L), 2), "queries": q, "keys": k},
        ],
        names=["first", "second"],
    )
    path = view.save(tmp_path / "keys.html")
    open_page(browser, path)
    from selenium.webdriver.common.keys import Keys

    assert browser.find_element("id", "ak-sentence").is_displayed()
    assert press(browser, Keys.ARROW_RIGHT, 2) == "drawn 0 head 0 1"
    assert press(browser, Keys.ARROW_DOWN, 3) == "drawn 0 head 1 1"
    assert press(browser, Keys.ARROW_LEFT, 4) == "drawn 0 head 1 0"
    assert press(browser, "2", 5) == "drawn 0 heatmap 1 0"
    assert press(browser, "a", 6) == "drawn 0 heatmap 1 0,1,2"
    assert press(browser, "5", 7) == f"drawn 0 rollout {N - 1} {N - 1}"
    assert press(browser, Keys.ARROW_UP, 8) == "drawn 0 rollout 0 0"
    assert press(browser, "n", 9).startswith("drawn 1 rollout")
    assert browser.find_element("id", "ak-sentence").get_attribute("value") == "1"
    assert press(browser, "4", 10).startswith("drawn 1 neuron")
    assert browser.find_element("id", "ak-query").get_attribute("value") == "0"
    press(browser, "]", 11)
    assert browser.find_element("id", "ak-query").get_attribute("value") == "1"
    press(browser, "p", 12)  # the first sentence has no vectors: the view says so
    assert "needs the query and key vectors" in browser.find_element("id", "ak-info").text
    assert not severe_logs(browser)


def test_neuron_view_shows_the_scores(browser: Any, tmp_path: Path) -> None:
    path, (w, q, k) = page(tmp_path, view="neuron", layer=1, head=2, query=3, scale=0.25)
    open_page(browser, path)
    assert page_state(browser)[1] == "drawn 0 neuron 1 2"
    from selenium.webdriver.common.action_chains import ActionChains

    canvas = browser.find_element("id", "ak-canvas")
    size = canvas.size
    rh, top = 14, 46  # page_neuron.js: rows of 14 px below a 46 px header (S <= 64)
    for j in (0, 4):
        y = top + j * rh + rh / 2 - size["height"] / 2
        ActionChains(browser).move_to_element_with_offset(canvas, 0, int(y)).perform()
        text = browser.find_element("id", "ak-info").text
        match = re.search(r"q \. k = (\S+), x scale (\S+) = (\S+); the model's weight (\S+)", text)
        assert match, text
        dot, scale, score, weight = (float(g) for g in match.groups())
        want = float(q[1, 2, 3] @ k[1, 0, j])
        # q and k at 8 bits: |error of q . k| <= E * (|q|max |k|max) * (1/254 + 1/254)
        allowed = E * np.abs(q[1, 2]).max() * np.abs(k[1, 0]).max() * 2 / 254 + 0.01
        assert abs(dot - want) <= allowed, f"key {j}: q . k {dot} vs {want} (allowed {allowed})"
        assert scale == 0.25 and abs(score - 0.25 * dot) <= 0.01 * max(1, abs(score))
        assert abs(weight - w[1, 2, 3, j]) <= w[1, 2].max() / 510 + 1e-4
    assert not severe_logs(browser)


def test_hover_highlights(browser: Any, tmp_path: Path) -> None:
    path, _ = page(tmp_path, view="heatmap")
    open_page(browser, path)
    from selenium.webdriver.common.action_chains import ActionChains

    info = browser.find_element("id", "ak-info")
    before = info.text
    ActionChains(browser).move_to_element(browser.find_element("id", "ak-canvas")).perform()
    assert info.text != before and "query" in info.text and "key" in info.text, info.text


def test_no_network_request(browser: Any, tmp_path: Path) -> None:
    path, _ = page(tmp_path)
    open_page(browser, path)
    for count, view in enumerate(["heatmap", "model", "neuron"], 2):
        select(browser, "ak-view", view, renders=count)
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


def banded_weights(N: int, H: int, n: int, seed: int) -> np.ndarray:
    """Attention-like float32 weights (N, H, n, n): each head a band at its own offset."""
    rng = np.random.default_rng(seed)
    i = np.arange(n, dtype=np.float32)
    out = np.empty((N, H, n, n), dtype=np.float32)
    for a in range(N):
        for h in range(H):
            centre = i[:, None] - (h % 5) - a  # each head looks a few tokens back
            scores = -0.5 * (i[None, :] - centre) ** 2 + rng.standard_normal((n, n)) * 0.5
            scores -= scores.max(-1, keepdims=True)
            e = np.exp(scores)
            out[a, h] = e / e.sum(-1, keepdims=True)
    return out


@pytest.mark.parametrize("size", [(12, 12, 512)], ids=["512 tokens x 12 layers x 12 heads"])
def test_page_at_512_tokens_12_layers_12_heads(
    browser: Any, tmp_path: Path, size: tuple[int, int, int]
) -> None:
    layers, heads, n = size
    w = banded_weights(layers, heads, n, seed=7)
    tokens = [f"t{i}" for i in range(n)]
    path = viz.AttentionView(w, tokens, head=1).save(tmp_path / "long.html")
    open_page(browser, path, timeout=60)
    first, colours = canvas_digest(browser)
    assert colours > 10
    digests = {first}
    for count, (element, value) in enumerate(
        [
            ("ak-head-key", "ArrowRight"),
            ("ak-view", "heatmap"),
            ("ak-view", "model"),
            ("ak-view", "rollout"),
            ("ak-layer", "5"),
        ],
        2,
    ):
        if element == "ak-head-key":
            from selenium.webdriver.common.keys import Keys

            press(browser, Keys.ARROW_RIGHT, count)
        else:
            select(browser, element, value, renders=count)
        digest, colours = canvas_digest(browser)
        assert colours > 10 and digest not in digests, f"{value}: nothing new drawn"
        digests.add(digest)
    assert not severe_logs(browser)
