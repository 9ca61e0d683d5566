"""``attnkit bench --viz``: how fast the interactive page draws, in headless Chromium.

A page of attention-like weights and query/key vectors (12 layers x 12 heads x 512
tokens; ``--quick``: 2 x 3 x 64) is written once and opened ``repeats`` times in headless
Chromium (selenium): the time to the first drawing, then the page's own time for the next
head and for each view. Medians are printed.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["FULL", "QUICK", "VizTiming", "format_timing", "missing_requirements", "run"]

#: (layers, heads, tokens, head features) of the timed page.
FULL = (12, 12, 512, 64)
QUICK = (2, 3, 64, 16)
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
_STEPS = (("next head", None), *((f"{v} view", v) for v in ("heatmap", "model", "neuron")))
STEPS = (*_STEPS, ("rollout view", "rollout"))


@dataclass(frozen=True)
class VizTiming:
    """Medians over the repeats, in milliseconds, and the page's size."""

    size: tuple[int, int, int, int]
    page_bytes: int
    build_s: float
    first_draw_ms: float
    steps_ms: dict[str, float]
    repeats: int


def missing_requirements() -> str | None:
    """Why the page cannot be timed here, or None."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).exists() and not shutil.which(Path(path).name):
            return f"{path} is not installed (apt-get install chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install selenium)"
    return None


def _weights(layers: int, heads: int, n: int) -> Any:
    import numpy as np

    rng = np.random.default_rng(0)
    i = np.arange(n, dtype=np.float32)
    out = np.empty((layers, heads, n, n), dtype=np.float32)  # (N, H, L, L)
    for a in range(layers):
        for h in range(heads):
            scores = -0.5 * (i[None, :] - (i[:, None] - (h % 5) - a % 3)) ** 2
            scores = scores + rng.standard_normal((n, n), dtype=np.float32) * 0.5
            e = np.exp(scores - scores.max(-1, keepdims=True))
            out[a, h] = e / e.sum(-1, keepdims=True)
    return out


def _page(size: tuple[int, int, int, int], folder: Path) -> tuple[Path, float]:
    import numpy as np

    from attnkit import viz

    layers, heads, n, e = size
    start = time.perf_counter()
    w = _weights(layers, heads, n)
    rng = np.random.default_rng(1)
    q = rng.standard_normal((layers, heads, n, e), dtype=np.float32)
    k = rng.standard_normal((layers, heads, n, e), dtype=np.float32)
    view = viz.AttentionView(w, [f"t{i}" for i in range(n)], queries=q, keys=k, head=1)
    path = view.save(folder / "page.html")
    return path, time.perf_counter() - start


def _driver(profile: Path) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--window-size=1200,900",
        "--no-first-run",
        "--disable-background-networking",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def _wait(driver: Any, renders: int, timeout: float = 120.0) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        d = driver.execute_script(
            "return Object.assign({}, document.getElementById('ak-root').dataset)"
        )
        if d.get("state") == "error":
            raise RuntimeError(driver.find_element("id", "ak-info").text)
        if int(d.get("renders", "0")) >= renders and d.get("state", "").startswith("drawn"):
            return d
        time.sleep(0.01)
    raise RuntimeError(f"the page did not draw {renders} times in {timeout} s")


def _once(driver: Any, path: Path) -> tuple[float, dict[str, float]]:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    driver.get("about:blank")
    driver.get(path.resolve().as_uri())
    first = float(_wait(driver, 1)["firstDrawMs"])
    steps = {}
    for count, (name, view) in enumerate(STEPS, 2):
        if view is None:
            driver.execute_script("document.getElementById('ak-canvas').focus()")
            ActionChains(driver).send_keys(Keys.ARROW_RIGHT).perform()
        else:
            Select(driver.find_element("id", "ak-view")).select_by_value(view)
        steps[name] = float(_wait(driver, count)["renderMs"])
    return first, steps


def run(size: tuple[int, int, int, int] = FULL, repeats: int = 3) -> VizTiming:
    """Build the page once, open it ``repeats`` times, return the medians."""
    with tempfile.TemporaryDirectory(prefix="attnkit-viz-") as tmp:
        folder = Path(tmp)
        path, build_s = _page(size, folder)
        driver = _driver(folder / "profile")
        try:
            runs = [_once(driver, path) for _ in range(repeats)]
        finally:
            driver.quit()
        page_bytes = path.stat().st_size
    steps = {name: statistics.median(r[1][name] for r in runs) for name, _ in STEPS}
    first = statistics.median(r[0] for r in runs)
    return VizTiming(size, page_bytes, build_s, first, steps, repeats)


def format_timing(t: VizTiming) -> str:
    """The report: the page, then one line per timed step (medians)."""
    layers, heads, n, e = t.size
    lines = [
        f"interactive page: {layers} layers x {heads} heads x {n} tokens (query/key vectors "
        f"of {e}), {t.page_bytes / 2**20:.1f} MiB, written in {t.build_s:.1f} s",
        f"headless Chromium, median of {t.repeats} fresh loads (software rendering):",
        f"  first drawing after navigation   {t.first_draw_ms:8.0f} ms",
    ]
    lines += [f"  {name:<32} {ms:8.0f} ms" for name, ms in t.steps_ms.items()]
    return "\n".join(lines)
