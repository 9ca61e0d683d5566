"""``attnkit verify``: the shipped golden vectors, the agreement table, the frameworks.

verify must pass on the installed backends, fail (exit 1) when a result is off, and find
the frameworks' known difference: ``jax.nn`` gives rows with nothing to attend the mean
of the values. (That the shipped vectors equal what ``conformance/make_golden.py``
computes is checked by ``conformance/test_golden.py``.)
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from attnkit.app import golden, verify
from attnkit.app import verify_frameworks as frameworks
from attnkit.app.cli import main


def test_vectors_ship_with_the_package() -> None:
    names = [f.name for f in golden.files()]
    assert len(names) >= 10 and names == sorted(names), names
    assert all(name.endswith(".npz") for name in names), names


def test_vectors_load() -> None:
    vectors = verify.load_vectors()
    assert len(vectors) >= 10
    empty = {v.name for v in vectors if v.empty_rows.any()}
    assert {"mask_bool_empty_rows", "causal_L_gt_S_bottom_right"} <= empty


def test_verify_numpy_and_torch(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    assert main(["verify", "--backend", "numpy", "--backend", "torch", "--plain"]) == 0
    out = capsys.readouterr().out
    table = out.split("\n\n")[1]  # the agreement table, before the frameworks' one
    rows = [line.split() for line in table.splitlines() if line.startswith(("numpy", "torch"))]
    assert [r[:2] for r in rows] == [
        ["numpy", "float64"],
        ["numpy", "float32"],
        ["numpy", "float16"],
        ["torch", "float64"],
        ["torch", "float32"],
        ["torch", "float16"],
        ["torch", "bfloat16"],
    ]
    for row in rows:
        error, ratio = float(row[3]), float(row[4])
        assert row[-1] == "ok" and ratio <= 1.0, row
        assert error < {"float64": 1e-14, "float32": 1e-6}.get(row[1], 0.05), row
    assert "torch SDPA" in out and "jax.nn" not in out


def test_verify_strict_one_dtype(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("array_api_strict")
    assert main(["verify", "--backend", "strict", "--dtype", "float64", "--plain"]) == 0
    out = capsys.readouterr().out
    assert "strict   float64" in out and "float32" not in out


def test_verify_fails_on_a_wrong_result(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    vectors = verify.load_vectors()
    bad = dataclasses.replace(vectors[1], out=vectors[1].out + 1e-9)  # off by 1e-9
    monkeypatch.setattr(verify, "load_vectors", lambda: [vectors[0], bad])
    args = ["verify", "--backend", "numpy", "--dtype", "float64", "--no-frameworks", "--plain"]
    assert main(args) == 1
    captured = capsys.readouterr()
    assert "FAILED (1)" in captured.out
    assert f"{bad.name} out: error 1e-09 >" in captured.err


def _subset(*names: str) -> list:  # type: ignore[type-arg]
    return [v for v in verify.load_vectors() if v.name in names]


def test_jax_backend_and_jax_nn_difference() -> None:
    pytest.importorskip("jax")
    vectors = _subset("basic_4d", "mask_bool_empty_rows", "causal_L_gt_S_bottom_right")
    agreement = verify.check_backend("jax", "float64", vectors)
    assert not agreement.failures and agreement.max_error < 1e-14, agreement
    results = {r.vector: r for r in frameworks.check_frameworks(vectors, ("jax",))}
    assert results["basic_4d"].agrees, results["basic_4d"]
    assert "zero-padded to E=8" in results["basic_4d"].adaptation  # Ev = 6, E = 8
    for name in ("mask_bool_empty_rows", "causal_L_gt_S_bottom_right"):
        r = results[name]
        assert (
            not r.agrees and "no key to attend: it gives the mean of the values" in r.difference
        ), r
    assert "causal bottom_right" in results["causal_L_gt_S_bottom_right"].adaptation


def test_torch_sdpa_agrees_with_explicit_masks() -> None:
    pytest.importorskip("torch")
    vectors = _subset("causal_L_lt_S_bottom_right", "window_int_2", "mask_bool_empty_rows")
    results = frameworks.check_frameworks(vectors, ("torch",))
    assert all(r.agrees for r in results), results
    assert all(r.max_error < 1e-14 for r in results), results
    by_name = {r.vector: r for r in results}
    assert "window=2 as an explicit bool mask" in by_name["window_int_2"].adaptation


def test_error_measure() -> None:
    gold = np.array([[0.5, -np.inf], [1.0, 2.0]])
    assert verify._error(gold + 1e-3 * np.isfinite(gold), gold) == pytest.approx(1e-3)
    assert verify._error(np.array([[0.5, 0.0], [1.0, 2.0]]), gold) == float("inf")
    assert np.isnan(verify._error(np.full((2, 2), np.nan), gold))
