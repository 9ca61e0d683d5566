"""Differential fuzzing of ``attnkit.attention_vjp`` against the float64 oracle.

Hypothesis draws whole calls (``fuzz_strategies.cases(..., gradients=True)``: float64,
shapes with broadcasting and GQA, masks of every kind and broadcast form, causal,
windows, offsets, scales, ALiBi, block sizes), an impl ("auto", "generic",
"reference"), NaN poison and extra choices below; each example runs
``out, vjp = attention_vjp(...)`` and ``vjp(d_out)`` for a fresh random ``d_out`` on the
backend chosen with ``--backend`` (no autodiff is needed: NumPy and array-api-strict too;
``--jit`` runs the forward and ``vjp`` under one ``jax.jit``) and checks:

- ``out`` against :func:`oracle.attention` (the tolerance table), NaN-free, exactly 0
  on rows with nothing to attend;
- ``dq, dk, dv`` against :func:`oracle.attention_grad` (analytic float64 gradients),
  in the operands' shapes and dtypes, NaN-free, ``dq`` exactly 0 on empty rows;
- ``d_mask`` (an additive array mask only; bool and structured masks give three
  gradients) in the mask's own shape (0-D, (S,), broadcast, stride-0 expanded) and
  dtype, against an independent NumPy formula written here, not attnkit's::

      P = oracle weights, O = oracle out, dP = where(allowed, dO @ V^T, 0)
      dS = P * (dP - rowsum(dO * O)),  d_mask = dS summed to the mask's shape

  (its allowed error scales with the sum of |dS| behind each element, as a sum's does);
- poison: NaN in the dead key and value rows (no query may attend them) and in the
  query rows with nothing to attend changes neither ``out`` nor any gradient;
- large finite additive values: rows of an additive mask shifted by -1e30 or -3e38
  (float32's range, in a float64 mask), which softmax cancels; gradients stay finite;
- a key or a value of one head meeting the other's heads under ``enable_gqa`` (the
  oracle repeats it, and its gradient is summed back over the heads).

Profiles and ``ATTNKIT_FUZZ_EXAMPLES`` as in ``test_fuzz.py``:
``ATTNKIT_FUZZ_PROFILE=long pytest conformance/test_fuzz_vjp.py --backend=numpy``.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import fuzz_oracle as fo
import hypothesis.strategies as st
import numpy as np
import pytest
from fuzz_oracle import ArrayMask, FuzzCase
from fuzz_strategies import FULL, SMALL, Sizes, cases
from harness import Backend
from hypothesis import example, given, note, settings
from test_fuzz import (
    IMPLS,
    PROFILE,
    _arrays,
    _context,
    _kwargs,
    _unchanged,
    poison_unused_rows,
)

import attnkit as ak
from attnkit import masks as ak_masks
from attnkit.testing.tolerances import assert_close, exact_allowed

#: Examples per backend, as a share of the profile's max_examples (ci: 2000), so that the
#: ci profile costs about 20-40 s per backend on a 2-core machine (the explicit examples
#: come on top). Per example about 10 ms on NumPy, 15 ms on PyTorch and 20 ms on
#: array-api-strict; JAX 1-5 s eagerly for each new shape (every operation of both passes
#: dispatched alone: 4 examples) and about 1.5 s under jit (one compilation per new
#: combination of shapes and static arguments).
_BACKEND_SHARE = {"numpy": 1.0, "strict": 0.6, "torch": 0.5, "jax": 0.002, "jax-jit": 0.01}

# Poison makes NumPy warn (invalid value in matmul): expected here.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

#: Extra draws: which operand (if any) is passed with one head under enable_gqa, a value
#: added to whole rows of an additive mask (0: none), and which row gets it.
ONE_HEAD = st.sampled_from([None, None, None, "key", "value"])
FLOORS = st.sampled_from([0.0, 0.0, -1e30, -3e38])
ROWS = st.integers(0, 2**16)


def _settings(backend: Backend) -> settings:
    base = settings.get_profile(PROFILE)
    n = int(os.environ.get("ATTNKIT_FUZZ_EXAMPLES", base.max_examples))
    name = backend.name + ("-jit" if backend.jit else "")
    return settings(base, max_examples=max(3, round(n * _BACKEND_SHARE[name])))


def _sizes(backend: Backend) -> Sizes:
    return SMALL if backend.name == "jax" else FULL


# --- the problem: the case's inputs, with a one-head operand and a mask floor -----------


def _with_floor(case: FuzzCase, floor: float, pick: int) -> FuzzCase:
    """``case`` with ``floor`` added to whole rows of its additive mask (where the mask
    has a query axis): the strategy's rows if it drew some, else row ``pick % L``."""
    m = case.mask
    rowwise = isinstance(m, ArrayMask) and len(m.shape) >= 2 and m.shape[-2] == case.L
    if not floor or not rowwise or m.kind != "additive" or case.L == 0:
        return case
    rows = m.floor_rows or (pick % case.L,)
    return replace(case, mask=replace(m, floor=floor, floor_rows=rows))


def _one_head(case: FuzzCase, which: str | None) -> str | None:
    """``which`` where the case can pass that operand with one head (GQA, Hkv > 1)."""
    if which is None or not case.enable_gqa or min(len(case.k), len(case.v)) < 3:
        return None
    return which if case.k[-3] > 1 else None


def _full_heads(x: np.ndarray, heads: int) -> np.ndarray:
    """(..., 1, N, X) -> (..., heads, N, X), a copy (the oracle's view of a one-head operand)."""
    return np.array(np.broadcast_to(x, (*x.shape[:-3], heads, *x.shape[-2:])))


def _sum_to(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum a broadcast gradient back to ``shape`` (a 0-D shape too)."""
    grad = grad.sum(axis=tuple(range(grad.ndim - len(shape))))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    return grad.sum(axis=axes, keepdims=True).reshape(shape)


def _one_head_dead(dead: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Dead rows (slices, S) of an operand of ``shape`` (..., H, S, X) that is really one
    head broadcast to H: dead only where dead under every head."""
    d = dead.reshape(*shape[:-1]).all(axis=-2, keepdims=True)
    return np.broadcast_to(d, shape[:-1]).reshape(dead.shape)


# --- the oracle's d_mask ------------------------------------------------------------------


def mask_grad(
    gold: fo.ref.Result, v: np.ndarray, d_out: np.ndarray, groups: int, shape: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """(d_mask, the sum of |dS| behind each of its elements), both of ``shape``, for an
    additive mask: dS = P * (dP - rowsum(dO * O)), dP = dO @ V^T on the allowed pairs
    (V's heads repeated ``groups`` times for GQA), summed to the mask's shape."""
    vv = np.repeat(v, groups, axis=-3) if groups > 1 else v
    with np.errstate(invalid="ignore", over="ignore"):
        dp = np.where(gold.allowed, d_out @ np.swapaxes(vv, -1, -2), 0.0)  # (*lead, L, S)
    ds = gold.weights * (dp - np.sum(d_out * gold.out, axis=-1, keepdims=True))
    return _sum_to(ds, shape), _sum_to(np.abs(ds), shape)


# --- running attention_vjp ----------------------------------------------------------------

_JITTED: dict[Any, Any] = {}


def _vjp(
    backend: Backend, q: Any, k: Any, v: Any, mask: Any, d_out: Any, kw: dict[str, Any]
) -> tuple[Any, tuple[Any, ...]]:
    """(out, vjp(d_out)) on the backend; under --jit both in one compiled function (one
    per combination of static arguments; array masks are traced, structured ones static)."""

    def fn(
        q: Any, k: Any, v: Any, d_out: Any, attn_mask: Any = None, **static: Any
    ) -> tuple[Any, tuple[Any, ...]]:
        out, vjp = ak.attention_vjp(q, k, v, attn_mask=attn_mask, **static)
        return out, tuple(vjp(d_out))

    if not backend.jit:
        return fn(q, k, v, d_out, mask, **kw)
    traced = {} if mask is None or isinstance(mask, ak_masks.Mask) else {"attn_mask": mask}
    static = dict(kw)
    if mask is not None and not traced:
        static["attn_mask"] = mask
    key = (tuple(sorted(static.items(), key=lambda kv: kv[0])), tuple(traced))
    try:
        hash(key)
    except TypeError:  # an unhashable static argument: compile this call alone
        return backend.jax.jit(lambda *a, **t: fn(*a, **t, **static))(q, k, v, d_out, **traced)
    if len(_JITTED) > 256:
        _JITTED.clear()
    if key not in _JITTED:
        _JITTED[key] = backend.jax.jit(lambda *a, **t: fn(*a, **t, **static))
    return _JITTED[key](q, k, v, d_out, **traced)


# --- the test -----------------------------------------------------------------------------

# Regressions of issue 26: a 0-D and a 1-D additive mask (d_mask in the mask's own shape),
# enable_gqa with key and value of one head, and with a key or a value of one head.
_ZERO_D = FuzzCase(
    q=(2, 6, 3),
    k=(2, 13, 3),
    v=(2, 13, 2),
    dtype="float64",
    seed=11,
    mask=ArrayMask("additive", (), keep=1.0, bias=1.0, seed=2),
)
_ONE_D = FuzzCase(
    q=(2, 2, 6, 8),
    k=(2, 2, 13, 8),
    v=(2, 2, 13, 8),
    dtype="float64",
    seed=12,
    mask=ArrayMask("additive", (13,), keep=0.7, dead_cols=(2,), bias=1.0, seed=3),
    is_causal=True,
)
_GQA_ONE = FuzzCase(
    q=(2, 4, 6, 3),
    k=(2, 1, 6, 3),
    v=(2, 1, 6, 2),
    dtype="float64",
    seed=13,
    mask=ArrayMask("additive", (4, 6, 6), keep=0.8, empty_rows=(1,), bias=1.0, seed=4),
    enable_gqa=True,
)
_GQA_TWO = FuzzCase(
    q=(2, 4, 6, 3),
    k=(2, 2, 13, 3),
    v=(2, 2, 13, 2),
    dtype="float64",
    seed=14,
    mask=ArrayMask("additive", (6, 13), keep=0.8, bias=6.0, seed=5, floor_rows=(0, 3)),
    enable_gqa=True,
    window=2,
)


def test_fuzz_vjp(backend: Backend) -> None:
    """attention_vjp's output and gradients equal the oracle's (float64)."""

    @_settings(backend)
    @given(
        case=cases(backend.dtypes, _sizes(backend), gradients=True),
        impl=st.sampled_from(IMPLS),
        poison=st.booleans(),
        one_head=ONE_HEAD,
        floor=FLOORS,
        pick=ROWS,
    )
    @example(case=_ZERO_D, impl="auto", poison=False, one_head=None, floor=0.0, pick=0)
    @example(case=_ONE_D, impl="generic", poison=True, one_head=None, floor=0.0, pick=0)
    @example(case=_GQA_ONE, impl="auto", poison=True, one_head=None, floor=0.0, pick=0)
    @example(case=_GQA_TWO, impl="auto", poison=True, one_head="key", floor=-3e38, pick=0)
    @example(case=_GQA_TWO, impl="reference", poison=False, one_head="value", floor=-1e30, pick=0)
    def run(
        case: FuzzCase, impl: str, poison: bool, one_head: str | None, floor: float, pick: int
    ) -> None:
        case = _with_floor(case, floor, pick)
        one_head = _one_head(case, one_head)
        note(f"{case.describe()}; one head: {one_head}")
        check_vjp(backend, case, impl, poison, one_head)

    run()


def check_vjp(
    backend: Backend, case: FuzzCase, impl: str, poison: bool, one_head: str | None
) -> None:
    """test_fuzz_vjp's checks of one case."""
    p = fo.build_problem(case)
    c = case
    lead = c.out_lead
    q, k, v = p.q, p.k, p.v  # k and v with all Hkv heads (the oracle's)
    if one_head is not None:  # the operand passed with one head: the oracle repeats it
        heads = c.k[-3]
        if one_head == "key":
            k = _full_heads(k[..., :1, :, :], heads)
        else:
            v = _full_heads(v[..., :1, :, :], heads)
        gold = fo.ref.attention(q, k, v, attn_mask=p.oracle_mask, **p.oracle_kwargs)
        p = replace(p, k=k, v=v, gold=gold)  # the score bound only shrinks: kept
    label = f"one head: {one_head}; no poison"
    if poison:

        def dead(dead_k: np.ndarray, dead_v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            if one_head == "key":
                return _one_head_dead(dead_k, c.k), dead_v
            if one_head == "value":
                return dead_k, _one_head_dead(dead_v, c.v)
            return dead_k, dead_v

        q, k, v, label = poison_unused_rows(p, c, q, k, v, dead)
        label = f"one head: {one_head}; {label}"
    d_out = np.random.default_rng(c.seed + 1).standard_normal((*lead, c.L, c.v[-1]))
    want = fo.ref.attention_grad(q, k, v, d_out, attn_mask=p.oracle_mask, **p.oracle_kwargs)
    k_call = k[..., :1, :, :] if one_head == "key" else k
    v_call = v[..., :1, :, :] if one_head == "value" else v
    arrays = _arrays(backend, p, q, k_call, v_call)
    kw = _kwargs(case, impl, False, False)
    ctx = f"{label}; " + _context(backend, case, impl, False, False).replace(
        ", return_weights=False, return_lse=False", ""
    )
    try:
        out, grads = _vjp(backend, *arrays, backend.asarray(d_out, "float64"), kw)
    except Exception as e:
        raise AssertionError(f"attention_vjp raised {type(e).__name__}: {e} ({ctx})") from e

    # the forward
    qb = arrays[0]
    assert type(out) is type(qb), f"out is a {type(out).__name__} ({ctx})"
    assert tuple(out.shape) == (*lead, c.L, c.v[-1]), f"out shape {tuple(out.shape)} ({ctx})"
    o = backend.to_numpy(out)
    assert not np.isnan(o).any(), f"out has {int(np.isnan(o).sum())} NaN ({ctx})"
    assert_close("out", o, p.gold.out, exact_allowed("float64", p.score_max, p.gold.out), ctx)
    empty = np.isneginf(p.gold.lse)  # (*lead, L): rows with nothing to attend
    assert np.all(o[empty] == 0.0), f"out on empty rows must be exactly 0 ({ctx})"

    # the gradients
    mask = arrays[3]
    additive = isinstance(c.mask, ArrayMask) and c.mask.kind == "additive"
    assert len(grads) == 3 + additive, (
        f"vjp gave {len(grads)} gradients, expected {3 + additive} ({ctx})"
    )
    dq, dk, dv = want
    if one_head == "key":
        dk = dk.sum(axis=-3, keepdims=True)
    elif one_head == "value":
        dv = dv.sum(axis=-3, keepdims=True)
    golds = [("dquery", dq), ("dkey", dk), ("dvalue", dv)]
    sums = [None, None, None]
    if additive:
        shape = tuple(mask.shape)
        d_mask, abs_sum = mask_grad(p.gold, v, d_out, c.groups, shape)
        golds.append(("d_mask", d_mask))
        sums.append(abs_sum)
    scale = max(1.0, float(np.max(np.abs(d_out), initial=0.0)))
    operands = (*arrays[:3], mask)[: len(golds)]
    for (name, gold), g, x, magnitude in zip(golds, grads, operands, sums, strict=True):
        assert type(g) is type(qb), f"{name} is a {type(g).__name__} ({ctx})"
        assert tuple(g.shape) == tuple(x.shape), (
            f"{name} shape {tuple(g.shape)}, its operand's {tuple(x.shape)} ({ctx})"
        )
        assert g.dtype == x.dtype, f"{name} dtype {g.dtype}, its operand's {x.dtype} ({ctx})"
        got = backend.to_numpy(g)
        assert not np.isnan(got).any(), f"{name} has {int(np.isnan(got).sum())} NaN ({ctx})"
        assert np.isfinite(gold).all(), f"the oracle's {name} is not finite ({ctx})"
        ref_size = gold if magnitude is None else magnitude
        allowed = exact_allowed("float64", p.score_max, ref_size) * scale
        assert_close(name, got, gold, allowed, ctx)
        if name == "d_mask":  # -inf entries mask every pair they reach: exactly 0
            leak = got[np.broadcast_to(np.isneginf(p.mask), got.shape)]
            assert np.all(leak == 0.0), (
                f"d_mask must be exactly 0 where the mask is -inf, max |d_mask| there "
                f"{float(np.max(np.abs(leak))):.3e} ({ctx})"
            )
    dq_got = backend.to_numpy(grads[0])
    if empty.any() and dq_got.shape[:-1] == empty.shape:
        bad = dq_got[empty]
        assert np.all(bad == 0.0), (
            f"dquery of rows with nothing to attend must be exactly 0, max |dq| there "
            f"{float(np.max(np.abs(bad))):.3e} ({ctx})"
        )
    _unchanged(backend, arrays, (q, k_call, v_call, p.mask), ctx)
