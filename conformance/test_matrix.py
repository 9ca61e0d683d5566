"""The conformance matrix: every case of ``cases.py`` on the backend chosen with --backend.

Run one backend with ``pytest conformance --backend torch`` (nox runs all of them). Each
test compares attnkit with the independent float64 oracle (``attnkit.testing.oracle``)
under the tolerance table (``attnkit.testing.tolerances``) and prints measured against
allowed error.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest
from cases import CASES, Case
from harness import LOW_PRECISION, Backend, draw_inputs, full_inputs, to_backend

import attnkit as ak
from attnkit.testing import oracle as ref
from attnkit.testing.tolerances import RHO_OUT, assert_close, exact_allowed, lowp_allowed

#: The executors under test: the default, the generic blocked path with block sizes
#: that do not divide the lengths (several uneven blocks), and the plain formula.
IMPLS = ("auto", "generic", "reference")


def impl_kwargs(impl: str, case: Case) -> dict[str, Any]:
    if impl == "generic":
        L = case.q[-2]
        return {"impl": "generic", "block_size": 3 if L <= 16 else L // 4 + 1}
    return {} if impl == "auto" else {"impl": impl}


def _cases(kind: str) -> list[Any]:
    return [pytest.param(c, id=c.name) for c in CASES if c.kind == kind]


def _require_dtype(backend: Backend, case: Case) -> None:
    if case.dtype not in backend.dtypes:
        pytest.skip(
            f"{backend.name} has no {case.dtype} (the array API standard does not require it)"
        )


def _score_max(case: Case, q: np.ndarray, k: np.ndarray, mask: Any) -> float:
    """An upper bound of |scaled score| + |additive bias| (Cauchy-Schwarz on the rows)."""
    scale = case.kwargs.get("scale")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else abs(scale)
    qn = float(np.max(np.linalg.norm(q, axis=-1), initial=0.0))
    kn = float(np.max(np.linalg.norm(k, axis=-1), initial=0.0))
    bias = 0.0
    if mask is not None and mask.dtype != bool:
        finite = mask[np.isfinite(mask)]
        bias = float(np.max(np.abs(finite), initial=0.0))
    return scale * qn * kn + bias


def _allowed(case: Case, gold: np.ndarray, lowp: np.ndarray | None, score_max: float) -> float:
    if case.dtype in LOW_PRECISION:
        with np.errstate(invalid="ignore"):
            diff = np.where(lowp == gold, 0.0, np.abs(lowp - gold))  # equal infinities: 0
        return lowp_allowed(case.dtype, float(np.max(diff, initial=0.0)), gold, RHO_OUT)
    return exact_allowed(case.dtype, score_max, gold)


def _context(case: Case, backend: Backend, impl: str) -> str:
    return (
        f"case {case.name}, backend {backend.name}{' jit' if backend.jit else ''}, impl {impl}, "
        f"dtype {case.dtype}, query {case.q}, key {case.k}, value {case.v}, kwargs {case.kwargs}"
    )


def _gold(case: Case, q, k, v, mask, **extra: Any) -> ref.Result:
    return ref.attention(q, k, v, attn_mask=mask, **case.kwargs, **extra)


def _unchanged(
    backend: Backend, arrays: tuple[Any, ...], originals: tuple[np.ndarray, ...]
) -> None:
    for x, original in zip(arrays, originals, strict=True):
        if x is None:
            continue
        got = backend.to_numpy(x)
        assert np.array_equal(got, np.broadcast_to(original, got.shape), equal_nan=True), (
            "attnkit modified its input in place"
        )


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", _cases("attention"))
def test_attention(case: Case, impl: str, backend: Backend) -> None:
    """out, weights and lse equal the oracle; empty rows give exactly 0; dtype is kept."""
    _require_dtype(backend, case)
    inputs = draw_inputs(case)
    q64, k64, v64, m64 = full_inputs(inputs, case)
    gold = _gold(case, q64, k64, v64, m64)
    lowp = None
    if case.dtype in LOW_PRECISION:
        lowp = ref.attention_lowp(q64, k64, v64, case.dtype, attn_mask=m64, **case.kwargs)
    smax = _score_max(case, q64, k64, m64)
    ctx = _context(case, backend, impl)
    empty = np.isneginf(gold.lse)
    if case.expect_empty_rows:
        assert empty.any(), f"the case should contain a row with nothing to attend ({ctx})"

    q, k, v, mask = to_backend(backend, inputs, case)
    kwargs = {**case.kwargs, **impl_kwargs(impl, case)}
    out = backend.call(ak.scaled_dot_product_attention, q, k, v, attn_mask=mask, **kwargs)
    assert str(out.dtype).endswith(case.dtype), f"output dtype {out.dtype} ({ctx})"
    out_np = backend.to_numpy(out)
    assert_close("out", out_np, gold.out, _allowed(case, gold.out, lowp and lowp.out, smax), ctx)
    assert np.all(out_np[empty] == 0.0), f"rows with nothing to attend must be exactly 0 ({ctx})"

    res = backend.call(
        ak.scaled_dot_product_attention,
        q,
        k,
        v,
        attn_mask=mask,
        return_weights=True,
        return_lse=True,
        **kwargs,
    )
    out2, weights, lse = res
    assert_close(
        "out (with weights)",
        backend.to_numpy(out2),
        gold.out,
        _allowed(case, gold.out, lowp and lowp.out, smax),
        ctx,
    )
    w = backend.to_numpy(weights)
    assert_close(
        "weights", w, gold.weights, _allowed(case, gold.weights, lowp and lowp.weights, smax), ctx
    )
    assert np.all((w >= 0) & (w <= 1 + 1e-6)), f"weights outside [0, 1] ({ctx})"
    sums = w.sum(axis=-1)
    tol = 1e-2 if case.dtype in LOW_PRECISION else 1e-5
    assert np.allclose(sums[~empty], 1.0, atol=tol), f"non-empty rows must sum to 1 ({ctx})"
    lse_np = backend.to_numpy(lse)
    lse_allowed = _allowed(case, gold.lse, lowp and lowp.lse, smax)
    assert_close("lse", lse_np, gold.lse, lse_allowed, ctx)
    _unchanged(backend, (q, k, v, mask), full_inputs(inputs, case))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", [p for p in _cases("attention") if p.values[0].grad])
def test_gradients(case: Case, impl: str, backend: Backend) -> None:
    """Gradients equal the oracle's analytic ones; rows with nothing to attend get 0."""
    if not backend.has_grad:
        pytest.skip(f"{backend.name} has no automatic differentiation")
    _require_dtype(backend, case)
    inputs = draw_inputs(case)
    q64, k64, v64, m64 = full_inputs(inputs, case)
    gold = _gold(case, q64, k64, v64, m64)
    dout = np.random.default_rng(case.seed + 1).standard_normal(gold.out.shape)
    gq, gk, gv = ref.attention_grad(q64, k64, v64, dout, attn_mask=m64, **case.kwargs)
    q, k, v, mask = to_backend(backend, inputs, case)
    got = backend.grads(
        ak.scaled_dot_product_attention,
        q,
        k,
        v,
        dout,
        attn_mask=mask,
        **case.kwargs,
        **impl_kwargs(impl, case),
    )
    ctx = _context(case, backend, impl)
    smax = _score_max(case, q64, k64, m64)
    for name, g, gold_g in zip(("dquery", "dkey", "dvalue"), got, (gq, gk, gv), strict=True):
        assert np.all(np.isfinite(g)), f"{name} has NaN or inf ({ctx})"
        allowed = exact_allowed(case.dtype, smax, gold_g) * max(1.0, float(np.max(np.abs(dout))))
        assert_close(name, g, gold_g, allowed, ctx)
    empty = np.isneginf(gold.lse)
    if empty.any() and got[0].shape[:-1] == empty.shape:
        assert np.all(got[0][empty] == 0.0), (
            f"dquery of rows with nothing to attend must be 0 ({ctx})"
        )


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", _cases("merge"))
def test_merge_pieces(case: Case, impl: str, backend: Backend) -> None:
    """Attention over key pieces (with kv_offset), merged by merge_partials, equals the whole."""
    _require_dtype(backend, case)
    inputs = draw_inputs(case)
    q64, k64, v64, m64 = full_inputs(inputs, case)
    gold = _gold(case, q64, k64, v64, m64)
    ctx = _context(case, backend, impl)
    q, k, v, mask = to_backend(backend, inputs, case)
    L, S = case.q[-2], case.k[-2]
    kwargs = {**case.kwargs, **impl_kwargs(impl, case)}
    if kwargs.pop("causal_alignment", "top_left") == "bottom_right":
        kwargs["q_offset"] = kwargs.get("q_offset", 0) + S - L  # as documented
    base = kwargs.pop("kv_offset", 0)
    bounds = (0, *case.pieces, S)
    outs, lses = [], []
    for lo, hi in itertools.pairwise(bounds):
        piece_mask = None if mask is None else (mask if mask.shape[-1] == 1 else mask[..., lo:hi])
        out, lse = backend.call(
            ak.scaled_dot_product_attention,
            q,
            k[..., lo:hi, :],
            v[..., lo:hi, :],
            attn_mask=piece_mask,
            return_lse=True,
            kv_offset=base + lo,
            **kwargs,
        )
        outs.append(out)
        lses.append(lse)
    if case.expect_empty_rows:
        empty_somewhere = any(np.isneginf(backend.to_numpy(x)).any() for x in lses)
        assert empty_somewhere, f"some piece should have rows with no key ({ctx})"
    out, lse = ak.merge_partials(outs, lses)
    smax = _score_max(case, q64, k64, m64)
    assert_close(
        "merged out",
        backend.to_numpy(out),
        gold.out,
        exact_allowed(case.dtype, smax, gold.out),
        ctx,
    )
    assert_close(
        "merged lse",
        backend.to_numpy(lse),
        gold.lse,
        exact_allowed(case.dtype, smax, gold.lse),
        ctx,
    )


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", _cases("dropout"))
def test_dropout(case: Case, impl: str, backend: Backend) -> None:
    """Drop rate within 0.01 of p; same rng state, same result; the weights are the applied ones."""
    _require_dtype(backend, case)
    inputs = draw_inputs(case)
    q64, k64, v64, m64 = full_inputs(inputs, case)
    gold = _gold(case, q64, k64, v64, m64)
    q, k, v, mask = to_backend(backend, inputs, case)
    kwargs = {
        **case.kwargs,
        **impl_kwargs(impl, case),
        "dropout_p": case.dropout_p,
        "return_weights": True,
    }
    ctx = _context(case, backend, impl)

    def run(seed: int):
        out, w = backend.call(
            ak.scaled_dot_product_attention,
            q,
            k,
            v,
            attn_mask=mask,
            rng=backend.make_rng(seed),
            **kwargs,
        )
        return backend.to_numpy(out), backend.to_numpy(w)

    out, w = run(7)
    out_again, w_again = run(7)
    assert np.array_equal(out, out_again) and np.array_equal(w, w_again), (
        f"same rng, different result ({ctx})"
    )
    out_other, _ = run(8)
    assert not np.array_equal(out, out_other), f"a different seed gave the same dropout ({ctx})"
    attended = gold.weights > 0
    rate = float(np.mean(w[attended] == 0.0))
    assert abs(rate - case.dropout_p) <= 0.01, f"drop rate {rate:.4f}, p = {case.dropout_p} ({ctx})"
    kept = attended & (w > 0)
    allowed = exact_allowed(case.dtype, 0.0, gold.weights) / (1 - case.dropout_p)
    assert_close("kept weights", w[kept], gold.weights[kept] / (1 - case.dropout_p), allowed, ctx)
    applied = w @ np.broadcast_to(v64, w.shape[:-2] + v64.shape[-2:])
    assert_close(
        "out vs weights @ value", out, applied, exact_allowed(case.dtype, 1.0, applied), ctx
    )
    empty = np.isneginf(gold.lse)
    assert np.all(out[empty] == 0.0), f"rows with nothing to attend must be 0 under dropout ({ctx})"


@pytest.mark.parametrize("case", _cases("equivalence"))
def test_bool_equals_additive(case: Case, backend: Backend) -> None:
    """A bool mask and its additive 0/-inf twin give the same output."""
    _require_dtype(backend, case)
    inputs = draw_inputs(case)
    q, k, v, mask = to_backend(backend, inputs, case)
    additive = backend.asarray(np.where(inputs.mask, 0.0, -np.inf), case.dtype)
    a = backend.to_numpy(
        backend.call(ak.scaled_dot_product_attention, q, k, v, attn_mask=mask, **case.kwargs)
    )
    b = backend.to_numpy(
        backend.call(ak.scaled_dot_product_attention, q, k, v, attn_mask=additive, **case.kwargs)
    )
    q64, k64, v64, m64 = full_inputs(inputs, case)
    gold = _gold(case, q64, k64, v64, m64)
    ctx = _context(case, backend, "auto")
    assert np.isneginf(gold.lse).any() or not case.mask.empty_rows
    assert_close("bool vs additive", a, b, exact_allowed(case.dtype, 1.0, gold.out), ctx)
    assert_close(
        "bool vs oracle",
        a,
        gold.out,
        exact_allowed(case.dtype, _score_max(case, q64, k64, None), gold.out),
        ctx,
    )


@pytest.mark.parametrize("poison", [math.nan, 1e10, math.inf, -math.inf])
@pytest.mark.parametrize("case", _cases("poison"))
def test_masked_positions_never_leak(case: Case, poison: float, backend: Backend) -> None:
    """NaN, huge or inf keys and values in columns no query may attend change nothing."""
    _require_dtype(backend, case)
    inputs = draw_inputs(case)
    q64, k64, v64, m64 = full_inputs(inputs, case)
    gold = _gold(case, q64, k64, v64, m64)
    cols = list(case.mask.dead_cols)
    k_bad, v_bad = k64.copy(), v64.copy()
    k_bad[..., cols, :] = poison
    v_bad[..., cols, :] = poison
    poisoned = type(inputs)(q64, k_bad, v_bad, inputs.mask, inputs.mask_spec, inputs.rng)
    q, k, v, mask = to_backend(backend, poisoned, case)
    ctx = _context(case, backend, "auto") + f", poison {poison}"
    for impl in IMPLS:
        extra = impl_kwargs(impl, case)
        out = backend.call(
            ak.scaled_dot_product_attention, q, k, v, attn_mask=mask, **case.kwargs, **extra
        )
        smax = _score_max(case, q64, k64, m64)
        assert_close(
            f"out ({impl})",
            backend.to_numpy(out),
            gold.out,
            exact_allowed(case.dtype, smax, gold.out),
            ctx,
        )
