"""Structured masks and score modifiers on the backend under test.

Each case gives an attnkit structure (built on the backend: some masks hold arrays) and
an independent NumPy construction of the same dense bool mask or score function. The
structured run (which skips key blocks) must equal the float64 oracle run with the dense
mask, for every impl, at lengths that are not multiples of the block size; its dense
materialization and density must equal the NumPy construction; gradients (torch, JAX)
must equal the oracle's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from harness import Backend

import attnkit as ak
from attnkit import masks, score_mods
from attnkit.testing import oracle as ref
from attnkit.testing.tolerances import assert_close, exact_allowed

B, H, L, S, E = 2, 3, 23, 29, 8
BLOCK = 5  # generic executor's query block: 23 and 29 are not multiples of it


@dataclass(frozen=True)
class StructuredCase:
    name: str
    make: Callable[[Backend], Any]  # -> attnkit Mask (or None)
    dense: Callable[[], np.ndarray] | None  # independent bool mask broadcastable to (B, H, L, S)
    L: int = L
    S: int = S
    kwargs: dict[str, Any] = field(default_factory=dict)
    score_mod: Callable[[Backend], Any] | None = None  # -> attnkit score_mod
    score_ref: Callable[..., np.ndarray] | None = None  # NumPy twin of score_mod
    expect_empty_rows: bool = False


def _pos(n: int, offset: int = 0) -> np.ndarray:
    return np.arange(n) + offset


def _window(left, right, Lq=L, Sk=S, shift=0):
    i, j = _pos(Lq)[:, None] + shift, _pos(Sk)[None, :]
    ok = np.ones((Lq, Sk), bool)
    if left is not None:
        ok &= j >= i - left
    if right is not None:
        ok &= j <= i + right
    return ok


PAD = (17, 9)
DOCS = (6, 10, 7)
DOC_IDS = np.repeat(np.arange(3), DOCS)  # (23,)
_rng = np.random.default_rng(11)
LAYOUT = _rng.random((-(-L // 4), -(-S // 6))) < 0.35  # (6, 5) blocks of (4, 6)
SEG_Q = np.sort(_rng.integers(0, 3, (B, L)), axis=-1)
SEG_K = np.sort(_rng.integers(0, 3, (B, S)), axis=-1)
DENSE = _rng.random((B, 1, L, S)) < 0.6


def _layout_dense(layout: np.ndarray, bq: int, bk: int, Lq=L, Sk=S) -> np.ndarray:
    full = np.kron(layout, np.ones((bq, bk), bool)).astype(bool)
    out = np.zeros((Lq, Sk), bool)
    r, c = min(Lq, full.shape[0]), min(Sk, full.shape[1])
    out[:r, :c] = full[:r, :c]
    return out


def _alibi_ref(s, qi, ki, head):
    slopes = np.asarray(score_mods.alibi_slopes(H))[head.reshape(-1)].reshape(head.shape)
    return s + slopes * (ki - qi)


def _custom_mod(s, qi, ki, head):
    import array_api_compat

    xp = array_api_compat.array_namespace(s)
    return s - 0.1 * xp.astype(abs(qi - ki), s.dtype) + 0.05 * xp.astype(head, s.dtype)


def _custom_ref(s, qi, ki, head):
    return s - 0.1 * np.abs(qi - ki) + 0.05 * head


CASES = [
    StructuredCase("causal_top_left", lambda b: masks.causal(), lambda: _window(None, 0)),
    StructuredCase(
        "causal_bottom_right",
        lambda b: masks.causal("bottom_right"),
        lambda: _window(None, 0, shift=S - L),
    ),
    StructuredCase("window_3_2", lambda b: masks.sliding_window((3, 2)), lambda: _window(3, 2)),
    StructuredCase(
        "causal_window_4", lambda b: masks.sliding_window((4, 0)), lambda: _window(4, 0)
    ),
    StructuredCase(
        "window_offsets",
        lambda b: masks.sliding_window(2),
        lambda: _window(2, 2, shift=7 - 3),
        kwargs={"q_offset": 7, "kv_offset": 3},
    ),
    StructuredCase(
        "key_padding_static",
        lambda b: masks.key_padding(list(PAD)),
        lambda: (np.arange(S)[None, :] < np.asarray(PAD)[:, None])[:, None, None, :],
    ),
    StructuredCase(
        "key_padding_array",
        lambda b: masks.key_padding(_int_array(b, np.asarray(PAD))),
        lambda: (np.arange(S)[None, :] < np.asarray(PAD)[:, None])[:, None, None, :],
    ),
    StructuredCase(
        "key_padding_and_causal",
        lambda b: masks.key_padding([0, 9]) & masks.causal(),
        lambda: (
            (np.arange(S)[None, :] < np.asarray([0, 9])[:, None])[:, None, None, :]
            & _window(None, 0)
        ),
        expect_empty_rows=True,
    ),
    StructuredCase(
        "documents",
        lambda b: masks.documents(DOCS),
        lambda: DOC_IDS[:, None] == DOC_IDS[None, :],
        S=L,
    ),
    StructuredCase(
        "documents_causal",
        lambda b: masks.documents(DOCS) & masks.causal(),
        lambda: (DOC_IDS[:, None] == DOC_IDS[None, :]) & _window(None, 0, L, L),
        S=L,
    ),
    StructuredCase(
        "segments_arrays",
        lambda b: masks.segments(_int_array(b, SEG_Q), _int_array(b, SEG_K)),
        lambda: (SEG_Q[:, :, None] == SEG_K[:, None, :])[:, None],
        expect_empty_rows=False,
    ),
    StructuredCase(
        "global_or_window",
        lambda b: masks.global_tokens(2) | masks.sliding_window(1),
        lambda: (np.arange(L)[:, None] < 2) | (np.arange(S)[None, :] < 2) | _window(1, 1),
    ),
    StructuredCase(
        "block_sparse",
        lambda b: masks.block_sparse(LAYOUT, (4, 6)),
        lambda: _layout_dense(LAYOUT, 4, 6),
        expect_empty_rows=bool((~LAYOUT).all(axis=1).any()),
    ),
    StructuredCase(
        "bigbird",
        lambda b: masks.bigbird(L, S, block_size=4, seed=3),
        lambda: _layout_dense(np.asarray(masks.bigbird(L, S, block_size=4, seed=3).layout), 4, 4),
    ),
    StructuredCase(
        "dense_array_mask",
        lambda b: masks.dense(b.asarray(DENSE, "bool")),
        lambda: DENSE,
    ),
    StructuredCase(
        "combined_and_or",
        lambda b: (masks.causal() | masks.global_tokens(3)) & masks.key_padding(list(PAD)),
        lambda: (
            (_window(None, 0) | (np.arange(L)[:, None] < 3) | (np.arange(S)[None, :] < 3))
            & (np.arange(S)[None, :] < np.asarray(PAD)[:, None])[:, None, None, :]
        ),
    ),
    StructuredCase(
        "window_param_and_mask",
        lambda b: masks.key_padding(list(PAD)),
        lambda: (
            _window(2, 2) & (np.arange(S)[None, :] < np.asarray(PAD)[:, None])[:, None, None, :]
        ),
        kwargs={"window": 2},
    ),
    StructuredCase(
        "window_mask_in_window_param",
        lambda b: None,
        lambda: _window(3, 0),
        kwargs={"window": masks.sliding_window((3, 0))},
    ),
    StructuredCase(
        "alibi_causal",
        lambda b: None,
        lambda: _window(None, 0),
        kwargs={"is_causal": True},
        score_mod=lambda b: score_mods.alibi(H),
        score_ref=_alibi_ref,
    ),
    StructuredCase(
        "softcap",
        lambda b: None,
        None,
        kwargs={"scale": 4.0},
        score_mod=lambda b: score_mods.softcap(5.0),
        score_ref=lambda s, qi, ki, h: 5.0 * np.tanh(s / 5.0),
    ),
    StructuredCase(
        "custom_score_mod_window",
        lambda b: masks.sliding_window(4),
        lambda: _window(4, 4),
        score_mod=lambda b: _custom_mod,
        score_ref=_custom_ref,
    ),
]


def _int_array(backend: Backend, a: np.ndarray) -> Any:
    if backend.name == "torch":
        return backend.torch.from_numpy(np.asarray(a, np.int64))
    if backend.name == "jax":
        return backend.jnp.asarray(a, dtype=backend.jnp.int32)
    if backend.name == "strict":
        return backend.xp.asarray(np.asarray(a, np.int64), device=backend.device)
    return np.asarray(a, np.int64)


def _draw(case: StructuredCase) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(abs(hash(case.name)) % 2**32)
    q = rng.standard_normal((B, H, case.L, E))
    k = rng.standard_normal((B, H, case.S, E))
    v = rng.standard_normal((B, H, case.S, 6))
    return q, k, v


def _oracle(case: StructuredCase, q, k, v, **extra) -> ref.Result:
    kwargs = {k_: v_ for k_, v_ in case.kwargs.items()}
    dense = None if case.dense is None else case.dense()
    if "window" in kwargs and dense is not None:
        kwargs.pop("window")  # already in the dense construction
    if "is_causal" in kwargs and dense is not None:
        kwargs.pop("is_causal")
    if "q_offset" in kwargs:  # offsets are in the dense construction; keep them for score_mod
        pass
    if dense is not None:
        kwargs = {k_: v_ for k_, v_ in kwargs.items() if k_ not in ("q_offset", "kv_offset")}
    return ref.attention(q, k, v, attn_mask=dense, score_mod=case.score_ref, **kwargs, **extra)


IMPLS = {
    "auto": {},
    "generic": {"impl": "generic", "block_size": BLOCK},
    "reference": {"impl": "reference"},
}
IDS = [c.name for c in CASES]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_structured_equals_dense_oracle(case: StructuredCase, impl: str, backend: Backend) -> None:
    q64, k64, v64 = _draw(case)
    gold = _oracle(case, q64, k64, v64)
    if case.expect_empty_rows:
        assert np.isneginf(gold.lse).any(), "the case should contain a row with nothing to attend"
    q, k, v = (backend.asarray(x, "float64") for x in (q64, k64, v64))
    structure = case.make(backend)
    kwargs = {**case.kwargs, **IMPLS[impl]}
    if case.score_mod is not None:
        kwargs["score_mod"] = case.score_mod(backend)
    out, w, lse = backend.call(
        ak.scaled_dot_product_attention,
        q,
        k,
        v,
        attn_mask=structure,
        return_weights=True,
        return_lse=True,
        **kwargs,
    )
    plain = backend.call(ak.scaled_dot_product_attention, q, k, v, attn_mask=structure, **kwargs)
    ctx = f"case {case.name}, backend {backend.name}, impl {impl}"
    smax = 5.0 * math.sqrt(E)
    assert_close(
        "out", backend.to_numpy(out), gold.out, exact_allowed("float64", smax, gold.out), ctx
    )
    assert_close(
        "out (no weights)",
        backend.to_numpy(plain),
        gold.out,
        exact_allowed("float64", smax, gold.out),
        ctx,
    )
    assert_close(
        "weights",
        backend.to_numpy(w),
        gold.weights,
        exact_allowed("float64", smax, gold.weights),
        ctx,
    )
    assert_close(
        "lse", backend.to_numpy(lse), gold.lse, exact_allowed("float64", smax, gold.lse), ctx
    )


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.dense is not None and c.score_mod is None], ids=lambda c: c.name
)
def test_materialize_and_density(case: StructuredCase, backend: Backend) -> None:
    structure = case.make(backend)
    if "window" in case.kwargs or structure is None:
        pytest.skip("the dense construction includes the window= argument")
    import array_api_compat

    xp = array_api_compat.array_namespace(backend.asarray(np.zeros(1), "float64"))
    device = getattr(backend, "device", None)
    offsets = {k: v for k, v in case.kwargs.items() if k in ("q_offset", "kv_offset")}
    dense = (
        backend.to_numpy(structure.materialize(xp, case.L, case.S, device=device, **offsets)) > 0
    )
    expected = np.broadcast_to(case.dense(), (*structure.lead, case.L, case.S))
    assert dense.shape == expected.shape, (dense.shape, expected.shape)
    assert np.array_equal(dense, expected), (
        f"materialized {case.name} differs from the NumPy construction"
    )
    density = structure.density(xp, case.L, case.S, device=device, **offsets)
    assert abs(density - float(np.mean(expected))) < 1e-12, (density, float(np.mean(expected)))


@pytest.mark.parametrize("impl", ["auto", "generic"])
@pytest.mark.parametrize("case", [c for c in CASES if c.score_mod is None], ids=lambda c: c.name)
def test_structured_gradients(case: StructuredCase, impl: str, backend: Backend) -> None:
    if not backend.has_grad:
        pytest.skip(f"{backend.name} has no automatic differentiation")
    q64, k64, v64 = _draw(case)
    gold = _oracle(case, q64, k64, v64)
    dout = np.random.default_rng(5).standard_normal(gold.out.shape)
    dense = case.dense()
    kwargs = {
        k_: v_ for k_, v_ in case.kwargs.items() if k_ not in ("window", "q_offset", "kv_offset")
    }
    gq, gk, gv = ref.attention_grad(q64, k64, v64, dout, attn_mask=dense, **kwargs)
    q, k, v = (backend.asarray(x, "float64") for x in (q64, k64, v64))
    got = backend.grads(
        ak.scaled_dot_product_attention,
        q,
        k,
        v,
        dout,
        attn_mask=case.make(backend),
        **case.kwargs,
        **IMPLS[impl],
    )
    ctx = f"case {case.name}, backend {backend.name}, impl {impl}"
    for name, g, gold_g in zip(("dquery", "dkey", "dvalue"), got, (gq, gk, gv), strict=True):
        assert np.all(np.isfinite(g)), f"{name} not finite ({ctx})"
        assert_close(
            name, g, gold_g, 10 * exact_allowed("float64", 5.0 * math.sqrt(E), gold_g), ctx
        )


@pytest.mark.parametrize("poison", [math.nan, math.inf, 1e10])
@pytest.mark.parametrize(
    "name", ["key_padding_static", "key_padding_array", "key_padding_and_causal"]
)
def test_padding_never_leaks(name: str, poison: float, backend: Backend) -> None:
    """NaN, inf or huge keys and values past each batch's length change nothing."""
    case = next(c for c in CASES if c.name == name)
    q64, k64, v64 = _draw(case)
    gold = _oracle(case, q64, k64, v64)
    lengths = (0, 9) if name == "key_padding_and_causal" else PAD
    k_bad, v_bad = k64.copy(), v64.copy()
    for b, n in enumerate(lengths):
        k_bad[b, :, n:, :] = poison
        v_bad[b, :, n:, :] = poison
    q, k, v = (backend.asarray(x, "float64") for x in (q64, k_bad, v_bad))
    for impl, extra in IMPLS.items():
        out = backend.call(
            ak.scaled_dot_product_attention, q, k, v, attn_mask=case.make(backend), **extra
        )
        ctx = f"case {name}, backend {backend.name}, impl {impl}, poison {poison}"
        assert_close(
            "out",
            backend.to_numpy(out),
            gold.out,
            exact_allowed("float64", 5.0 * math.sqrt(E), gold.out),
            ctx,
        )
