"""NumPy's per-block kernel (attnkit.backends.numpy.kernel), used by impl="auto".

Checked against an independent float64 formula on the cases it must handle: bool and
additive masks with fully masked rows, GQA (shared key/value heads read as views),
broadcast leading dims, windows, and its scratch buffer reused across dtypes and sizes.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from _helpers import numpy_attention64
from attnkit.backends.numpy import kernel as fused

import attnkit as ak
from attnkit import backends

TOL = {"float32": 3e-6, "float64": 1e-12}


def _check(out, ref, dtype, biggest_score=1.0):
    """Relative error within TOL, scaled by the largest score: rounding the scores moves
    each exponent by about eps * |score| in any implementation."""
    err = float(np.max(np.abs(out.astype(np.float64) - ref)) / np.max(np.abs(ref)))
    tol = TOL[dtype] * max(1.0, biggest_score)
    assert err <= tol, f"max relative error {err:.3g} > allowed {tol:.2g}"


@pytest.fixture
def kernel_calls(monkeypatch):
    calls = []
    original = fused.block_attention

    def spy(*args):
        out = original(*args)
        calls.append(out is not None)
        return out

    backend = backends.load("numpy")
    monkeypatch.setattr(backend, "kernels", dataclasses.replace(backend.kernels, block=spy))
    return calls


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_bool_mask_with_empty_rows(kernel_calls, dtype):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 4, 150, 32)).astype(dtype)
    k, v = (rng.standard_normal((2, 4, 170, 32)).astype(dtype) for _ in range(2))
    allowed = rng.random((2, 1, 150, 170)) > 0.5
    allowed[1, 0, :3] = False
    out = ak.scaled_dot_product_attention(q, k, v, attn_mask=allowed, block_size=64)
    assert kernel_calls and all(kernel_calls), "the NumPy kernel must run every block"
    assert out.dtype == dtype and np.all(out[1, :, :3] == 0)
    _check(out, numpy_attention64(q, k, v, allowed), dtype)


def test_additive_mask_and_broadcast_lead(kernel_calls):
    rng = np.random.default_rng(1)
    q = rng.standard_normal((3, 1, 90, 16))
    k, v = (rng.standard_normal((1, 2, 60, 16)) for _ in range(2))
    additive = rng.standard_normal((1, 2, 90, 60))
    additive[0, 1, 5] = -np.inf  # a row masked out entirely by -inf
    out = ak.scaled_dot_product_attention(q, k, v, attn_mask=additive)
    assert all(kernel_calls) and out.shape == (3, 2, 90, 16)
    assert np.all(out[:, 1, 5] == 0)
    _check(out, numpy_attention64(q, k, v, additive=additive), "float64")


def test_nan_scores_under_an_additive_minus_inf_never_leak(kernel_calls):
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((1, 2, 6, 8)) for _ in range(3))
    k[0, 0, 2] = np.nan  # every score against key 2 of head 0 is NaN
    additive = np.zeros((6, 6))
    additive[:3, 2] = -np.inf  # rows 0-2 may not attend key 2 (rows 3-5 may: NaN there)
    additive[0, 3] = 0.5
    out = ak.scaled_dot_product_attention(q, k, v, attn_mask=additive)
    assert all(kernel_calls) and np.all(np.isfinite(out[0, 0, :3]))
    clean = k.copy()
    clean[0, 0, 2] = 0.0  # never read by rows 0-2
    _check(out[0, 0, :3], numpy_attention64(q, clean, v, additive=additive)[0, 0, :3], "float64")


def test_gqa_window_and_scores_needing_the_row_max(kernel_calls):
    rng = np.random.default_rng(2)
    q = (rng.standard_normal((1, 8, 300, 32)) * 30).astype("float32")  # scores ~ 1e3
    k = (rng.standard_normal((1, 2, 300, 32)) * 30).astype("float32")
    v = rng.standard_normal((1, 2, 300, 32)).astype("float32")
    out = ak.scaled_dot_product_attention(q, k, v, enable_gqa=True, window=(20, 5))
    assert all(kernel_calls) and np.all(np.isfinite(out))
    i = np.arange(300)
    allowed = (i[None, :] >= i[:, None] - 20) & (i[None, :] <= i[:, None] + 5)
    kr, vr = np.repeat(k, 4, axis=1), np.repeat(v, 4, axis=1)
    biggest = float(np.max(np.abs(q.astype(float) @ np.swapaxes(kr, -1, -2)))) / math.sqrt(32)
    _check(out, numpy_attention64(q, kr, vr, allowed), "float32", biggest)


def test_scratch_reused_across_dtypes_and_sizes():
    rng = np.random.default_rng(3)
    for dtype, L, S in (("float64", 40, 50), ("float32", 200, 300), ("float64", 10, 20)):
        q = rng.standard_normal((2, L, 8)).astype(dtype)
        k, v = (rng.standard_normal((2, S, 8)).astype(dtype) for _ in range(2))
        out = fused.block_attention(q, k, v, None, 1 / math.sqrt(8), False)
        assert out.dtype == dtype
        _check(out, numpy_attention64(q, k, v), dtype)


def test_declines_what_it_does_not_handle():
    q = np.ones((2, 4, 8), dtype="float16")
    assert fused.block_attention(q, q, q, None, 1.0) is None
    empty = np.ones((2, 0, 8))
    assert fused.block_attention(np.ones((2, 4, 8)), empty, empty, None, 1.0) is None


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_no_subnormal_weights(monkeypatch, dtype):
    """Scores far below their row's maximum would give subnormal exponentials (slow on
    x86); they are flushed to exactly 0 first, which changes no result."""
    rng = np.random.default_rng()
    spread = {"float32": 40, "float64": 160}[dtype]  # scores spread past exp's normal range
    q = (rng.standard_normal((2, 64, 16)) * spread).astype(dtype)
    k, v = (rng.standard_normal((2, 48, 16)).astype(dtype) for _ in range(2))
    lowest = []
    original = np.exp

    def spy(x, *args, **kwargs):
        finite = x[np.isfinite(x)]
        lowest.append(float(finite.min()) if finite.size else math.inf)
        return original(x, *args, **kwargs)

    monkeypatch.setattr(np, "exp", spy)
    out = fused.block_attention(q, k, v, None, 0.25, False)
    monkeypatch.setattr(np, "exp", original)
    floor = math.log(float(np.finfo(dtype).tiny))
    assert lowest and min(lowest) >= floor, (min(lowest), floor)
    s = q.astype(np.float64) @ np.swapaxes(k, -1, -2).astype(np.float64) * 0.25
    assert (s - s.max(axis=-1, keepdims=True)).min() < floor  # the case arises
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    ref = (e @ v) / e.sum(axis=-1, keepdims=True)
    _check(out, ref, dtype, biggest_score=float(np.abs(s).max()))
