"""The executor's two exact shortcuts (attnkit.blocked.operands): no row maximum when the
Cauchy-Schwarz bound proves every score small, and the row sums out of ``e @ [v | 1]``.

Each case is compared with an independent float64 NumPy formula; the bound's decision
is checked on inputs on both sides of it, so the fallback (row maximum subtracted) is
exercised as well as the shortcut.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from _helpers import problem

import attnkit as ak
from attnkit.blocked import operands

TOL = {"float32": 2e-6, "float64": 1e-12}


def _reference(q, k, v, allowed=None, scale=None):
    """softmax(where(allowed, q k^T * scale, -inf)) v in float64; empty rows give 0."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ np.swapaxes(k, -1, -2) * scale
    if allowed is not None:
        s = np.where(allowed, s, -np.inf)
    m = np.max(s, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    d = e.sum(axis=-1, keepdims=True)
    return (e @ v) / np.where(d > 0, d, 1.0)


def _problem(q, k, v, **kw):
    return problem(q, k, v, impl="generic", **kw)


def _rel_err(out, ref):
    return float(np.max(np.abs(np.asarray(out, dtype=np.float64) - ref)) / np.max(np.abs(ref)))


def _tol(dtype, q, k, scale=None):
    """The allowed error grows with the largest score: rounding the scores to the dtype
    moves each exponent by about eps * |score| (any implementation, any shortcut)."""
    q, k = np.asarray(q, dtype=np.float64), np.asarray(k, dtype=np.float64)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    biggest = float(np.max(np.abs(q @ np.swapaxes(k, -1, -2)))) * abs(scale)
    return TOL[dtype] * max(1.0, biggest)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_limit_keeps_every_exp_normal_and_finite(dtype):
    info = np.finfo(dtype)
    for S in (1, 128, 4096, 10**6):
        t = operands.shift_free_limit(info, S)
        assert t > 10, f"limit {t} too small to be useful at S={S}"
        assert S * math.exp(t) <= float(info.max) / 8 * (1 + 1e-9)
        assert math.exp(-t) >= float(info.smallest_normal) * 8 * (1 - 1e-9)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_bound_decides_both_ways(dtype):
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 256, 64)).astype(dtype) for _ in range(3))
    ops = operands.prepare_operands(_problem(q, k, v), None, shortcuts=True)
    assert ops.shift_free, "random normal scores are far below the limit"
    assert ops.value_ones is not None and ops.value_ones.shape == (2, 256, 65)
    big = operands.prepare_operands(_problem(q * 40, k * 40, v), None, shortcuts=True)
    assert not big.shift_free, "scores up to ~1e4 must keep the row maximum"
    bad = q.copy()
    bad[0, 3, 5] = np.nan
    assert not operands.prepare_operands(_problem(bad, k, v), None, shortcuts=True).shift_free
    short = operands.prepare_operands(_problem(q[:, :8], k, v), None, shortcuts=True)
    assert not short.shift_free, "L < 2E: the norms would cost more than they save"
    plain = operands.prepare_operands(_problem(q, k, v), None)
    assert not plain.shift_free and plain.value_ones is None


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("factor", [1.0, 40.0], ids=["shortcut", "fallback"])
@pytest.mark.parametrize("impl", ["generic", "auto"])
def test_outputs_match_float64_reference(dtype, factor, impl):
    rng = np.random.default_rng(2)
    q = (rng.standard_normal((2, 3, 300, 64)) * factor).astype(dtype)
    k = (rng.standard_normal((2, 3, 280, 64)) * factor).astype(dtype)
    v = rng.standard_normal((2, 3, 280, 48)).astype(dtype)
    allowed = rng.random((2, 1, 300, 280)) > 0.4
    allowed[0, 0, 7] = False  # a fully masked row
    out = ak.scaled_dot_product_attention(q, k, v, attn_mask=allowed, impl=impl, block_size=64)
    ref = _reference(q, k, v, allowed)
    err, tol = _rel_err(out, ref), _tol(dtype, q, k)
    assert err <= tol, f"max relative error {err:.3g} > allowed {tol:.2g}"
    assert np.all(out[0, :, 7] == 0), "a fully masked row must give exactly 0"


def test_lse_matches_without_row_max():
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((4, 200, 32)) for _ in range(3))
    out, lse = ak.scaled_dot_product_attention(q, k, v, return_lse=True, impl="generic")
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(32)
    ref_lse = np.log(np.exp(s).sum(-1))
    assert np.max(np.abs(lse - ref_lse)) <= 1e-12
    np.testing.assert_allclose(out, _reference(q, k, v), rtol=0, atol=1e-12)


def test_window_and_large_scores_stay_finite():
    """Scores near the float32 range: the bound fails, the row maximum is subtracted."""
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((1, 2, 512, 64)).astype("float32") for _ in range(3))
    out = ak.scaled_dot_product_attention(q, k, v, window=(16, 16), scale=30.0)
    idx = np.arange(512)
    allowed = np.abs(idx[:, None] - idx[None, :]) <= 16
    ref = _reference(q, k, v, allowed, scale=30.0)
    assert np.all(np.isfinite(out))
    err, tol = _rel_err(out, ref), _tol("float32", q, k, scale=30.0)
    assert err <= tol, f"max relative error {err:.3g} > allowed {tol:.2g}"


def test_torch_autograd_through_shortcut():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 200, 64, dtype=torch.float64, generator=g) for _ in range(3))
    for x in (q, k, v):
        x.requires_grad_(True)
    out = ak.scaled_dot_product_attention(q, k, v, impl="generic", block_size=64)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    ref_grads = torch.autograd.grad(ref.square().sum(), (q, k, v))
    for name, a, b in zip("qkv", grads, ref_grads, strict=True):
        err = float((a - b).abs().max() / b.abs().max())
        assert err <= 1e-12, f"d{name}: relative error {err:.3g} > allowed 1e-12"


def test_jax_jit_falls_back_to_row_max():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    keys = jax.random.split(jax.random.key(6), 3)
    q, k, v = (jax.random.normal(kk, (2, 256, 64)) for kk in keys)
    eager = ak.scaled_dot_product_attention(q, k, v, impl="generic")
    jitted = jax.jit(lambda a, b, c: ak.scaled_dot_product_attention(a, b, c, impl="generic"))
    ref = _reference(np.asarray(q), np.asarray(k), np.asarray(v))
    for out in (eager, jitted(q, k, v)):
        err = _rel_err(np.asarray(out), ref)
        assert err <= 2e-6, f"max relative error {err:.3g} > allowed 2e-6"
    assert jnp.all(jnp.isfinite(eager))


def test_max_square_norm_in_chunks_keeps_nan():
    import array_api_compat.numpy as xp

    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 20000, 64))  # 2 chunks of 16384 rows
    expected = float(np.max(np.sum(x * x, axis=-1)))
    assert operands._max_square_norm(xp, x, float) == pytest.approx(expected, rel=1e-12)
    x[1, 19000, 3] = np.nan  # in the second chunk
    assert math.isnan(operands._max_square_norm(xp, x, float))
