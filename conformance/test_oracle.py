"""Validate the float64 oracle, :mod:`attnkit.testing.oracle`, against brute force.

The brute-force oracle below loops over every (batch, head, i, j) in plain
Python with ``math.exp``, on tiny random shapes with fixed seeds. Gradients
are checked against central finite differences.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from attnkit.testing.oracle import (
    allowed_mask,
    attention,
    attention_grad,
    attention_lowp,
    merge,
    round_to,
)

RTOL, ATOL = 1e-12, 1e-14


def randn(seed: int, *shape: int) -> np.ndarray:
    """Random normal float64 data (never exactly zero)."""
    return np.random.default_rng(seed).standard_normal(shape)


def brute_allowed(
    i: int,
    j: int,
    L: int,
    S: int,
    *,
    is_causal: bool = False,
    causal_alignment: str = "top_left",
    window: Any = None,
    q_offset: int = 0,
    kv_offset: int = 0,
) -> bool:
    """Whether query i may attend to key j, from the position definitions."""
    qpos = q_offset + i + (S - L if causal_alignment == "bottom_right" else 0)
    kpos = kv_offset + j
    if is_causal and kpos > qpos:
        return False
    if window is not None:
        left, right = (window, window) if isinstance(window, int) else window
        if left is not None and kpos < qpos - left:
            return False
        if right is not None and kpos > qpos + right:
            return False
    return True


def brute(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    mask: np.ndarray | None = None,
    scale: float | None = None,
    groups: int = 1,
    keep: np.ndarray | None = None,
    dropout_p: float = 0.0,
    **pos: Any,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """q (B, Hq, L, E), k (B, Hkv, S, E), v (B, Hkv, S, Ev); mask and keep
    (B, Hq, L, S). Returns out (B, Hq, L, Ev), weights (B, Hq, L, S), lse."""
    B, H, L, E = q.shape
    S, Ev = k.shape[2], v.shape[3]
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    out, weights = np.zeros((B, H, L, Ev)), np.zeros((B, H, L, S))
    lse = np.full((B, H, L), -math.inf)
    for b in range(B):
        for h in range(H):
            kh = h // groups
            for i in range(L):
                scores = {}
                for j in range(S):
                    ok, add = brute_allowed(i, j, L, S, **pos), 0.0
                    if mask is not None and mask.dtype == bool:
                        ok = ok and bool(mask[b, h, i, j])
                    elif mask is not None:
                        add = float(mask[b, h, i, j])
                        ok = ok and add != -math.inf
                    if ok:
                        dot = sum(float(q[b, h, i, e] * k[b, kh, j, e]) for e in range(E))
                        scores[j] = dot * scale + add
                if not scores:
                    continue
                m = max(scores.values())
                z = sum(math.exp(s - m) for s in scores.values())
                lse[b, h, i] = m + math.log(z)
                for j, s in scores.items():
                    p = math.exp(s - m) / z
                    if keep is not None:
                        p = p * float(keep[b, h, i, j]) / (1.0 - dropout_p)
                    weights[b, h, i, j] = p
                    for c in range(Ev):
                        out[b, h, i, c] += p * float(v[b, kh, j, c])
    return out, weights, lse


def assert_matches(res: Any, expected: tuple[np.ndarray, ...]) -> None:
    out, weights, lse = expected
    assert res.out.shape == out.shape and res.weights.shape == weights.shape
    np.testing.assert_allclose(res.out, out, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(res.weights, weights, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(res.lse, lse, rtol=RTOL, atol=ATOL)
    assert np.all(res.weights[~res.allowed] == 0)


def qkv(seed: int, B: int, H: int, L: int, S: int, E: int = 3, Ev: int = 2, Hkv: int = 0):
    Hkv = Hkv or H
    return randn(seed, B, H, L, E), randn(seed + 1, B, Hkv, S, E), randn(seed + 2, B, Hkv, S, Ev)


@pytest.mark.parametrize(
    "B,H,L,S,E,Ev", [(1, 1, 1, 1, 1, 1), (2, 3, 4, 5, 3, 2), (1, 2, 5, 3, 4, 6)]
)
def test_no_mask(B: int, H: int, L: int, S: int, E: int, Ev: int) -> None:
    q, k, v = qkv(0, B, H, L, S, E, Ev)
    assert_matches(attention(q, k, v), brute(q, k, v))
    assert_matches(attention(q, k, v, scale=0.7), brute(q, k, v, scale=0.7))


def test_bool_mask_broadcast() -> None:
    q, k, v = qkv(1, 2, 3, 4, 5)
    mask = np.random.default_rng(9).random((2, 1, 4, 5)) < 0.6  # broadcast over heads
    assert_matches(
        attention(q, k, v, attn_mask=mask), brute(q, k, v, mask=np.broadcast_to(mask, (2, 3, 4, 5)))
    )


def test_additive_mask_with_neg_inf() -> None:
    q, k, v = qkv(2, 1, 2, 4, 5)
    mask = randn(3, 4, 5)
    mask[0, [1, 3]] = -np.inf
    mask[2, :] = -np.inf  # row 2 becomes empty
    res = attention(q, k, v, attn_mask=mask)
    assert_matches(res, brute(q, k, v, mask=np.broadcast_to(mask, (1, 2, 4, 5))))
    assert not res.allowed[..., 0, 1].any() and not res.allowed[..., 2, :].any()
    assert np.all(res.out[..., 2, :] == 0) and np.all(res.lse[..., 2] == -np.inf)


def test_allowed_mask_by_hand() -> None:
    expected = [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    got = allowed_mask(3, 5, is_causal=True, causal_alignment="bottom_right")
    np.testing.assert_array_equal(got, np.array(expected, dtype=bool))
    got = allowed_mask(2, 4, window=(1, 0), q_offset=2)
    np.testing.assert_array_equal(got, np.array([[0, 1, 1, 0], [0, 0, 1, 1]], dtype=bool))


@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
@pytest.mark.parametrize("L,S", [(3, 5), (4, 4), (5, 3)])
def test_causal(align: str, L: int, S: int) -> None:
    q, k, v = qkv(4, 2, 2, L, S)
    res = attention(q, k, v, is_causal=True, causal_alignment=align)
    assert_matches(res, brute(q, k, v, is_causal=True, causal_alignment=align))
    empty = ~res.allowed.any(axis=-1)
    assert empty.any() == (align == "bottom_right" and L > S)
    assert np.all(res.out[empty] == 0) and np.all(res.lse[empty] == -np.inf)


@pytest.mark.parametrize("window", [2, (1, 0), (None, 1), (2, None), (0, 0), (None, None)])
@pytest.mark.parametrize("is_causal,align", [(False, "top_left"), (True, "bottom_right")])
def test_window_with_offsets(window: Any, is_causal: bool, align: str) -> None:
    q, k, v = qkv(5, 1, 2, 4, 6)
    kw = dict(window=window, is_causal=is_causal, causal_alignment=align, q_offset=3, kv_offset=2)
    assert_matches(attention(q, k, v, **kw), brute(q, k, v, **kw))


def test_gqa_matches_repeated_heads() -> None:
    q, k, v = qkv(6, 2, 4, 3, 5, Hkv=2)
    res = attention(q, k, v, enable_gqa=True, is_causal=True)
    rep = attention(q, np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1), is_causal=True)
    np.testing.assert_allclose(res.out, rep.out, rtol=RTOL, atol=ATOL)
    assert_matches(res, brute(q, k, v, groups=2, is_causal=True))


def test_dropout() -> None:
    q, k, v = qkv(7, 1, 2, 3, 4)
    keep = np.random.default_rng(8).random((1, 2, 3, 4)) < 0.7
    res = attention(q, k, v, dropout_keep=keep, dropout_p=0.25)
    assert_matches(res, brute(q, k, v, keep=keep, dropout_p=0.25))
    np.testing.assert_array_equal(res.lse, attention(q, k, v).lse)


def test_rank2_and_broadcast_leading_dims() -> None:
    q, k, v = randn(10, 3, 4), randn(11, 5, 4), randn(12, 5, 2)
    res = attention(q, k, v)
    assert res.out.shape == (3, 2) and res.lse.shape == (3,)
    assert_matches(res, tuple(a[0, 0] for a in brute(q[None, None], k[None, None], v[None, None])))
    qb = randn(13, 2, 1, 3, 4)  # (2, 1, L, E) against key/value (3, S, *)
    kb, vb = randn(14, 3, 5, 4), randn(15, 3, 5, 2)
    res = attention(qb, kb, vb)
    assert res.out.shape == (2, 3, 3, 2)
    full = (
        np.broadcast_to(qb, (2, 3, 3, 4)),
        np.broadcast_to(kb, (2, 3, 5, 4)),
        np.broadcast_to(vb, (2, 3, 5, 2)),
    )
    assert_matches(res, brute(*full))


def test_empty_rows_give_zero() -> None:
    q, k, v = qkv(16, 1, 1, 3, 4)
    mask = np.ones((3, 4), dtype=bool)
    mask[1] = False
    res = attention(q, k, v, attn_mask=mask)
    assert np.all(res.out[..., 1, :] == 0) and np.all(res.weights[..., 1, :] == 0)
    assert np.all(res.lse[..., 1] == -np.inf) and np.all(np.isfinite(res.out))


def dirty_problem() -> tuple[np.ndarray, ...]:
    """Keys 1 and 3 and query row 2 are fully masked; returns clean, dirty, mask."""
    q, k, v = qkv(17, 1, 2, 3, 5)
    mask = np.ones((3, 5), dtype=bool)
    mask[:, [1, 3]] = False
    mask[2] = False
    qd, kd, vd = q.copy(), k.copy(), v.copy()
    kd[..., 1, :], kd[..., 3, :] = np.nan, 1e30
    vd[..., 1, :], vd[..., 3, :] = np.nan, np.inf
    qd[..., 2, :] = np.inf
    return q, k, v, qd, kd, vd, mask


def test_nonfinite_at_masked_positions_is_ignored() -> None:
    q, k, v, qd, kd, vd, mask = dirty_problem()
    clean, dirty = attention(q, k, v, attn_mask=mask), attention(qd, kd, vd, attn_mask=mask)
    for a, b in [(clean.out, dirty.out), (clean.weights, dirty.weights), (clean.lse, dirty.lse)]:
        np.testing.assert_allclose(b, a, rtol=RTOL, atol=ATOL)
    assert np.all(np.isfinite(dirty.out)) and np.all(dirty.out[..., 2, :] == 0)
    g = randn(18, *clean.out.shape)
    for a, b in zip(
        attention_grad(q, k, v, g, attn_mask=mask),
        attention_grad(qd, kd, vd, g, attn_mask=mask),
        strict=True,
    ):
        assert np.all(np.isfinite(b))
        np.testing.assert_allclose(b, a, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("L,S,cuts", [(5, 3, [1, 2]), (4, 7, [2, 5]), (3, 6, [3])])
def test_merge_of_key_pieces(L: int, S: int, cuts: list[int]) -> None:
    q, k, v = qkv(19, 2, 2, L, S)
    mask = np.random.default_rng(20).random((L, S)) < 0.8
    kw = dict(is_causal=True, window=(2, None))
    whole = attention(q, k, v, attn_mask=mask, causal_alignment="bottom_right", **kw)
    outs, lses = [], []
    for a, b in zip([0, *cuts], [*cuts, S], strict=True):
        # bottom_right over the whole == top_left shifted by S - L, per piece.
        piece = attention(
            q,
            k[..., a:b, :],
            v[..., a:b, :],
            attn_mask=mask[:, a:b],
            q_offset=S - L,
            kv_offset=a,
            **kw,
        )
        outs.append(piece.out)
        lses.append(piece.lse)
    out, lse = merge(outs, lses)
    assert any(np.any(x == -np.inf) for x in lses)  # some rows empty in some piece
    np.testing.assert_allclose(out, whole.out, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(lse, whole.lse, rtol=RTOL, atol=ATOL)
    assert np.all(np.isfinite(out))
    if L > S:  # leading rows are empty in every piece
        assert np.all(lse[..., 0] == -np.inf) and np.all(out[..., 0, :] == 0)


def test_merge_ignores_empty_piece() -> None:
    out, lse = randn(21, 3, 2), randn(22, 3)
    bad_out, bad_lse = np.full((3, 2), np.nan), np.full(3, -np.inf)
    merged, merged_lse = merge([bad_out, out], [bad_lse, lse])
    np.testing.assert_allclose(merged, out, rtol=RTOL)
    np.testing.assert_allclose(merged_lse, lse, rtol=RTOL)
    none, none_lse = merge([bad_out], [bad_lse])
    assert np.all(none == 0) and np.all(none_lse == -np.inf)


def finite_difference(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, eps: float = 1e-6, **kw: Any
) -> list[np.ndarray]:
    """Central differences of sum(out * g) w.r.t. every element of q, k, v."""
    args, grads = [q.copy(), k.copy(), v.copy()], []
    for x in args:
        grad = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            old = x[idx]
            x[idx] = old + eps
            hi = np.sum(attention(*args, **kw).out * g)
            x[idx] = old - eps
            lo = np.sum(attention(*args, **kw).out * g)
            x[idx] = old
            grad[idx] = (hi - lo) / (2 * eps)
        grads.append(grad)
    return grads


def empty_row_mask() -> np.ndarray:
    mask = np.zeros((3, 4))
    mask[0, 2] = -np.inf
    mask[1] = -np.inf  # fully masked row 1
    return mask


@pytest.mark.parametrize("case", ["mask", "broadcast", "gqa", "dropout"])
def test_grad_vs_finite_differences(case: str) -> None:
    q, k, v = qkv(23, 2, 2, 3, 4)
    kw: dict[str, Any] = {"attn_mask": empty_row_mask()}
    if case == "broadcast":
        k, v = k[:1], v[:, :1]  # key (1, 2, S, E), value (2, 1, S, Ev)
        kw["is_causal"], kw["causal_alignment"] = True, "bottom_right"
    elif case == "gqa":
        q = randn(24, 2, 4, 3, 3)
        kw.update(enable_gqa=True, is_causal=True, window=(1, None), q_offset=1)
    elif case == "dropout":
        kw.update(dropout_keep=np.random.default_rng(25).random((2, 2, 3, 4)) < 0.7, dropout_p=0.3)
    g = randn(26, *attention(q, k, v, **kw).out.shape)
    dq, dk, dv = attention_grad(q, k, v, g, **kw)
    assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, v.shape)
    numeric = finite_difference(q, k, v, g, **kw)
    for analytic, fd in zip((dq, dk, dv), numeric, strict=True):
        np.testing.assert_allclose(analytic, fd, rtol=1e-6, atol=1e-8)
    assert np.all(dq[..., 1, :] == 0)  # the fully masked query row


def test_round_bfloat16_known_values() -> None:
    cases = {
        1.0: 1.0,
        1 + 2**-8: 1.0,  # tie: rounds to even
        1 + 3 * 2**-8: 1 + 2**-6,  # tie: rounds to even (up)
        1 + 2**-8 + 2**-30: 1 + 2**-7,  # just above the tie (no double rounding)
        3.14159: 3.140625,
        -3.14159: -3.140625,
        3.3895313892515355e38: 3.3895313892515355e38,  # max finite bfloat16
        3.4e38: np.inf,
        np.inf: np.inf,
        -np.inf: -np.inf,
    }
    got = round_to(np.array(list(cases)), "bfloat16")
    np.testing.assert_array_equal(got, np.array(list(cases.values())))
    assert np.isnan(round_to(np.nan, "bfloat16")) and round_to(2.0, "bfloat16").shape == ()


def test_round_bfloat16_all_midpoints() -> None:
    """Every tie between neighbouring positive bfloat16 values rounds to even."""
    bits = np.arange(0x7F7F, dtype=np.uint32)  # all finite positive patterns but the max
    lo = (bits << 16).view(np.float32).astype(np.float64)
    hi = ((bits + 1) << 16).view(np.float32).astype(np.float64)
    mid = (lo + hi) / 2
    np.testing.assert_array_equal(round_to(mid, "bfloat16"), np.where(bits % 2 == 0, lo, hi))
    np.testing.assert_array_equal(round_to(np.nextafter(mid, 0), "bfloat16"), lo)
    np.testing.assert_array_equal(round_to(np.nextafter(mid, np.inf), "bfloat16"), hi)


@pytest.mark.parametrize("name,np_type", [("float16", np.float16), ("float32", np.float32)])
def test_round_float16_float32(name: str, np_type: Any) -> None:
    x = randn(27, 1000) * np.logspace(-10, 6, 1000)
    x = np.concatenate([x, [np.inf, -np.inf, 1e40, 6.6e4, 0.0]])
    with np.errstate(over="ignore"):
        expected = x.astype(np_type).astype(np.float64)
    np.testing.assert_array_equal(round_to(x, name), expected)
    np.testing.assert_array_equal(round_to(x, "float64"), x)


def test_attention_lowp() -> None:
    q, k, v = qkv(28, 2, 2, 6, 7, E=8, Ev=4)
    kw = dict(is_causal=True, causal_alignment="bottom_right")
    exact = attention(q, k, v, **kw)
    np.testing.assert_allclose(
        attention_lowp(q, k, v, "float64", **kw).out, exact.out, rtol=RTOL, atol=ATOL
    )
    err = {}
    for name in ("float16", "bfloat16"):
        low = attention_lowp(q, k, v, name, **kw)
        assert np.array_equal(round_to(low.out, name), low.out)
        err[name] = np.max(np.abs(low.out - exact.out))
    assert 0 < err["float16"] < err["bfloat16"] < 0.1
    empty = attention_lowp(q, k, v, "float16", attn_mask=np.zeros((6, 7), dtype=bool))
    assert np.all(empty.out == 0) and np.all(empty.lse == -np.inf)


def test_zero_length_shapes() -> None:
    q, k, v = randn(29, 2, 3, 4), np.ones((2, 0, 4)), np.ones((2, 0, 5))
    res = attention(q, k, v)
    assert res.out.shape == (2, 3, 5) and np.all(res.out == 0)
    assert res.weights.shape == (2, 3, 0) and np.all(res.lse == -np.inf)
    dq, _, _ = attention_grad(q, k, v, np.ones((2, 3, 5)))
    assert np.all(dq == 0)
    res = attention(np.ones((2, 0, 4)), randn(30, 2, 3, 4), randn(31, 2, 3, 5))
    assert (res.out.shape, res.weights.shape, res.lse.shape) == ((2, 0, 5), (2, 0, 3), (2, 0))


def test_bad_arguments() -> None:
    q, k, v = qkv(32, 1, 3, 2, 2, Hkv=2)
    with pytest.raises(ValueError, match="causal_alignment"):
        attention(q[:, :2], k, v, causal_alignment="middle")
    with pytest.raises(ValueError, match="window"):
        attention(q[:, :2], k, v, window=(-1, 0))
    with pytest.raises(ValueError, match="GQA"):
        attention(q, k, v, enable_gqa=True)
    with pytest.raises(ValueError, match="dtype_name"):
        round_to(1.0, "float8")
