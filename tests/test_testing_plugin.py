"""The pytest plugin of attnkit.testing: ``pytest --attnkit-check package.module:function``
adds one test per function, which fails with the kit's report; without the option it adds
nothing. Run in a fresh pytest process on a module written here."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

KERNELS = """
import numpy as np


def plain(query, key, value, is_causal=False):
    s = query @ np.swapaxes(key, -1, -2) * query.shape[-1] ** -0.5
    L, S = s.shape[-2:]
    if is_causal:
        s = np.where(np.tri(L, S, 0, dtype=bool), s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True, initial=-np.inf))
    return w / np.maximum(w.sum(-1, keepdims=True), 1e-300) @ value


def bottom_right(query, key, value, is_causal=False):
    L, S = query.shape[-2], key.shape[-2]
    s = query @ np.swapaxes(key, -1, -2) * query.shape[-1] ** -0.5
    if is_causal:
        s = np.where(np.tri(L, S, S - L, dtype=bool), s, -1e30)
    w = np.exp(s - s.max(-1, keepdims=True, initial=-np.inf))
    return w / w.sum(-1, keepdims=True) @ value
"""


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "kernels_for_plugin.py").write_text(KERNELS)
    (tmp_path / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    return subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False
    )


def test_the_plugin_is_registered() -> None:
    plugins = {e.name: e.value for e in metadata.entry_points(group="pytest11")}
    assert plugins.get("attnkit") == "attnkit.testing.pytest_plugin"


def test_checks_pass_fail_with_the_report_or_name_what_is_wrong(tmp_path: Path) -> None:
    """Four checks in one pytest run: a right function passes, one with another causal
    alignment fails with the report naming it, a bad option and a missing name fail with
    what is wrong."""
    run = _pytest(
        tmp_path,
        "--attnkit-check",
        "kernels_for_plugin:plain",
        "--attnkit-check",
        "kernels_for_plugin:bottom_right",
        "--attnkit-check",
        "kernels_for_plugin:missing",
        "--attnkit-examples",
        "3",
        "-rA",
    )
    out = run.stdout
    assert run.returncode == 1, out + run.stderr
    assert "2 failed, 2 passed" in out, out  # test_nothing and plain pass
    assert "PASSED ::attnkit-check[kernels_for_plugin:plain]" in out
    assert "attnkit check of kernels_for_plugin:bottom_right" in out
    assert "causal masks are aligned bottom-right" in out
    assert "has no attribute 'missing'" in out
    bad = _pytest(
        tmp_path, "--attnkit-check", "kernels_for_plugin:plain", "--attnkit-supports", "windo"
    )
    assert bad.returncode == 1 and "'windo', not keyword arguments" in bad.stdout, bad.stdout


def test_without_the_option_nothing_is_added(tmp_path: Path) -> None:
    run = _pytest(tmp_path)
    assert run.returncode == 0 and "1 passed" in run.stdout, run.stdout
    assert "attnkit" not in run.stdout
