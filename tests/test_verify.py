"""``attnkit verify``: the shipped golden vectors, the agreement table, the frameworks.

verify must pass on the installed backends, fail (exit 1) when a result is off, and find
the frameworks' known differences: ``jax.nn`` (and Keras on JAX) gives rows with nothing
to attend the mean of the values and computes float64 at float32's accuracy;
``torch.nn.MultiheadAttention`` gives those rows NaN; SDPA and FlexAttention agree. Each
difference is named by attnkit.testing's detectors, in its words, and is what its
frameworks table says of that framework. ``--against`` checks someone's function.
(That the shipped vectors equal what ``conformance/make_golden.py``
computes is checked by ``conformance/test_golden.py``.)
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from attnkit.app import verify
from attnkit.app.cli import main
from attnkit.app.verify import frameworks, golden


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
    assert (
        "torch MultiheadAttention in float64: rows with no allowed key give NaN: the "
        "convention of torch.nn.MultiheadAttention" in out
    )
    assert "as attnkit.testing's frameworks table says" in out and "NOT what" not in out


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
    results = frameworks.check_frameworks(vectors, ("jax",))
    by = {(r.framework, r.dtype, r.vector): r for r in results}
    basic = by["jax.nn", "float32", "basic_4d"]
    assert basic.agrees and "zero-padded to E=8" in basic.adaptation, basic  # Ev = 6, E = 8
    for name in ("mask_bool_empty_rows", "causal_L_gt_S_bottom_right"):
        for dtype in ("float64", "float32", "float16", "bfloat16"):
            r = by["jax.nn", dtype, name]
            assert r.kind == "empty rows" and "the mean of the values" in r.difference, r
    assert "causal bottom_right" in by["jax.nn", "float32", "causal_L_gt_S_bottom_right"].adaptation
    f64 = by["jax.nn", "float64", "basic_4d"]
    assert f64.kind == "precision" and 1e-9 < f64.max_error < 1e-5, f64  # float32's accuracy


def test_torch_frameworks_agree_but_multihead_attention_gives_nan() -> None:
    pytest.importorskip("torch")
    vectors = _subset(
        "causal_L_lt_S_bottom_right",
        "window_int_2",
        "mask_bool_empty_rows",
        "gqa_4_over_2",
        "zero_S",
    )
    results = frameworks.check_frameworks(vectors, ("torch",), dtypes=("float64",))
    by = {(r.framework, r.vector): r for r in results}
    for (framework, name), r in by.items():
        if framework == "torch MultiheadAttention" and name == "mask_bool_empty_rows":
            assert r.kind == "empty rows" and "NaN" in r.difference, r
        elif r.kind != "n/a":
            assert r.agrees and r.max_error < 1e-14, r
    assert by["torch MultiheadAttention", "zero_S"].kind == "n/a"
    assert "repeated 2 times" in by["torch MultiheadAttention", "gqa_4_over_2"].adaptation
    assert "window=2 as an explicit bool mask" in by["torch SDPA", "window_int_2"].adaptation
    assert {f for f, _ in by} == {"torch SDPA", "torch MultiheadAttention", "FlexAttention (eager)"}


def test_json_report(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    pytest.importorskip("torch")
    args = ["verify", "--backend", "numpy", "--backend", "torch", "--dtype", "float64", "--json"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] and {a["backend"] for a in report["attnkit"]} == {"numpy", "torch"}
    kinds = {(f["framework"], f["kind"]) for f in report["findings"]}
    assert ("torch MultiheadAttention", "empty rows") in kinds
    for finding in report["findings"]:  # the kit's words, and what its table says
        assert finding["declared"] and finding["conventions"], finding
    mha = [f for f in report["findings"] if f["framework"] == "torch MultiheadAttention"]
    assert mha[0]["conventions"] == ["empty_rows=nan"]
    assert all(r["dtype"] == "float64" for r in report["frameworks"])


def test_keras_when_installed() -> None:
    pytest.importorskip("jax")
    pytest.importorskip("keras")
    vectors = _subset("basic_4d", "mask_bool_empty_rows")
    results = [
        r
        for r in frameworks.check_frameworks(vectors, ("jax",), dtypes=("float32",))
        if r.framework == "keras.ops"
    ]
    by = {r.vector: r for r in results}
    assert by["basic_4d"].agrees and by["mask_bool_empty_rows"].kind == "empty rows", by


def test_error_measure() -> None:
    gold = np.array([[0.5, -np.inf], [1.0, 2.0]])
    assert verify._error(gold + 1e-3 * np.isfinite(gold), gold) == pytest.approx(1e-3)
    assert verify._error(np.array([[0.5, 0.0], [1.0, 2.0]]), gold) == float("inf")
    assert np.isnan(verify._error(np.full((2, 2), np.nan), gold))


def test_verify_against_a_function(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """``attnkit verify --against package.module:function`` prints the kit's report; exit
    status 0 when it agrees, 1 when it differs, 2 for a name that does not resolve."""
    (tmp_path / "kernels_under_check.py").write_text(
        "import numpy as np\n"
        "def attention(query, key, value, attn_mask=None):\n"
        "    s = query @ np.swapaxes(key, -1, -2) * query.shape[-1] ** -0.5\n"
        "    if attn_mask is not None:\n"
        "        s = np.where(attn_mask, s, -1e30)  # rows with no key: the mean\n"
        "    w = np.exp(s - s.max(-1, keepdims=True, initial=-np.inf))\n"
        "    return (w / w.sum(-1, keepdims=True)) @ value\n"
        "def plain(query, key, value):\n"
        "    s = query @ np.swapaxes(key, -1, -2) * query.shape[-1] ** -0.5\n"
        "    w = np.exp(s - s.max(-1, keepdims=True, initial=-np.inf))\n"
        "    return (w / np.maximum(w.sum(-1, keepdims=True), 1e-300)) @ value\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    args = ["verify", "--against", "kernels_under_check:attention", "--examples", "0"]
    assert main([*args, "--supports", "attn_mask"]) == 1
    out = capsys.readouterr().out
    assert "attnkit.testing.check_attention: kernels_under_check.attention (numpy): DIFFERS" in out
    assert "rows with no allowed key give the mean of the values" in out
    assert main(["verify", "--against", "kernels_under_check:plain", "--dtypes", "float32"]) == 0
    assert ": ok" in capsys.readouterr().out
    assert main(["verify", "--against", "kernels_under_check:missing"]) == 2
    assert "has no attribute 'missing'" in capsys.readouterr().err
