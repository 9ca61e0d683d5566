"""``attnkit bench --viz``: the page timed in headless Chromium (a quick, real run)."""

from __future__ import annotations

import pytest

from attnkit.app import cli
from attnkit.app.bench import viz_page


def test_bench_viz_quick(capsys: pytest.CaptureFixture[str]) -> None:
    why = viz_page.missing_requirements()
    if why:
        pytest.skip(why)
    timing = viz_page.run(viz_page.QUICK, repeats=1)
    assert timing.page_bytes > 10_000 and timing.first_draw_ms > 0
    assert set(timing.steps_ms) == {name for name, _ in viz_page.STEPS}
    assert all(ms > 0 for ms in timing.steps_ms.values()), timing.steps_ms
    report = viz_page.format_timing(timing)
    assert "first drawing after navigation" in report and "model view" in report
    assert cli.main(["bench", "--viz", "--quick", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "2 layers x 3 heads x 64 tokens" in out and "neuron view" in out
