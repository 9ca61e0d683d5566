"""Independent float64 NumPy oracle for scaled dot-product attention.

This module is the conformance oracle for ``attnkit`` (not to be confused with
``impl="reference"``, the library's own plain formula). It is deliberately
written without any code from the library itself: clarity first, speed and
memory last (it may copy, repeat heads and build large masks).

Shapes (``...`` are leading dims, broadcast by NumPy rules)::

    query (..., Hq, L, E)   key (..., Hkv, S, E)   value (..., Hkv, S, Ev)
    out   (..., Hq, L, Ev)  weights (..., Hq, L, S)  lse (..., Hq, L)

A rank-2 input ``(L, E)`` simply has no head axis. Positions are
``qpos[i] = q_offset + i + shift`` and ``kpos[j] = kv_offset + j`` with
``shift = 0`` (``"top_left"``) or ``S - L`` (``"bottom_right"``). A key is
allowed when the causal rule, the window rule and the user mask all allow it.
Masked positions never influence any result, even if the raw score, key or
value there is NaN or infinite. A row with no allowed key gives out 0,
weights 0 and ``lse = -inf``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "Result",
    "allowed_mask",
    "attention",
    "attention_grad",
    "attention_lowp",
    "merge",
    "round_to",
]

Window = int | tuple[int | None, int | None] | None
Rounder = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Result:
    """Attention results, all float64 (``allowed`` is bool).

    out (..., Hq, L, Ev); weights (..., Hq, L, S), after dropout if any;
    lse (..., Hq, L), the log-sum-exp of the allowed scores (no dropout);
    allowed (..., Hq, L, S), True where query i may attend to key j.
    """

    out: np.ndarray
    weights: np.ndarray
    lse: np.ndarray
    allowed: np.ndarray


def _window_sides(window: Window) -> tuple[int | None, int | None]:
    """Normalise ``window`` to ``(left, right)``; None means unbounded."""
    if window is None:
        return None, None
    if isinstance(window, (int, np.integer)):
        left = right = int(window)
    else:
        left, right = window
    for side in (left, right):
        if side is not None and side < 0:
            raise ValueError(f"window sides must be >= 0 or None, got {window!r}")
    return left, right


def allowed_mask(
    L: int,
    S: int,
    *,
    is_causal: bool = False,
    causal_alignment: str = "top_left",
    window: Window = None,
    q_offset: int = 0,
    kv_offset: int = 0,
) -> np.ndarray:
    """Positional mask (L, S) bool: True where query i may attend to key j."""
    if causal_alignment == "top_left":
        shift = 0
    elif causal_alignment == "bottom_right":
        shift = S - L
    else:
        raise ValueError(
            f"causal_alignment must be 'top_left' or 'bottom_right', got {causal_alignment!r}"
        )
    qpos = q_offset + shift + np.arange(L)[:, None]  # (L, 1)
    kpos = kv_offset + np.arange(S)[None, :]  # (1, S)
    allowed = np.ones((L, S), dtype=bool)
    if is_causal:
        allowed &= kpos <= qpos
    left, right = _window_sides(window)
    if left is not None:
        allowed &= kpos >= qpos - left
    if right is not None:
        allowed &= kpos <= qpos + right
    return allowed


def _identity(x: np.ndarray) -> np.ndarray:
    return x


def _masked_matmul(a: np.ndarray, b: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``a @ b`` for a (..., M, K), b (..., K, N), dropping every term a_mk b_kn
    where keep (..., M, K) is False, so a NaN/inf in ``b`` there cannot leak."""
    a = np.where(keep, a, 0.0)
    if np.all(np.isfinite(b)):
        return a @ b
    terms = a[..., :, :, None] * b[..., None, :, :]  # (..., M, K, N)
    return np.where(keep[..., None], terms, 0.0).sum(axis=-2)  # (..., M, N)


def _sum_to(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum a broadcast gradient back to ``shape`` (undo NumPy broadcasting)."""
    grad = grad.sum(axis=tuple(range(grad.ndim - len(shape))))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    return grad.sum(axis=axes, keepdims=True).reshape(shape)


@dataclass(frozen=True)
class _Problem:
    """Validated, broadcast-ready inputs shared by forward and backward."""

    q: np.ndarray  # (..., Hq, L, E)
    k: np.ndarray  # (..., Hq, S, E), kv heads repeated for GQA
    v: np.ndarray  # (..., Hq, S, Ev), kv heads repeated for GQA
    allowed: np.ndarray  # (*batch, L, S) bool, fully broadcast
    bias: np.ndarray  # additive mask, broadcastable to allowed (0.0 if none)
    drop: np.ndarray  # dropout factor keep / (1 - p), broadcastable (1.0 if none)
    scale: float
    groups: int  # G = Hq // Hkv (1 without GQA)
    score_mod: Any  # None or f(scores, q_idx (L, 1), kv_idx (1, S), head (Hq, 1, 1)) -> scores
    q_idx: np.ndarray  # (L, 1) absolute query positions (q_offset + i)
    kv_idx: np.ndarray  # (1, S) absolute key positions (kv_offset + j)
    shapes: tuple[tuple[int, ...], ...]  # original query, key, value shapes


def _prepare(
    query: Any,
    key: Any,
    value: Any,
    *,
    attn_mask: Any = None,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    causal_alignment: str = "top_left",
    window: Window = None,
    q_offset: int = 0,
    kv_offset: int = 0,
    dropout_keep: Any = None,
    dropout_p: float = 0.0,
    score_mod: Any = None,
    rnd: Rounder = _identity,
) -> _Problem:
    q, k, v = (rnd(np.asarray(x, dtype=np.float64)) for x in (query, key, value))
    shapes = (q.shape, k.shape, v.shape)
    if min(q.ndim, k.ndim, v.ndim) < 2:
        raise ValueError(f"query, key, value need rank >= 2, got shapes {shapes}")
    L, E = q.shape[-2:]
    S = k.shape[-2]
    if k.shape[-1] != E or v.shape[-2] != S:
        raise ValueError(f"inconsistent query/key/value shapes {shapes}")

    groups = 1
    if enable_gqa and min(q.ndim, k.ndim, v.ndim) >= 3:
        hq, hkv = q.shape[-3], k.shape[-3]
        if v.shape[-3] != hkv or hq % hkv != 0:
            raise ValueError(f"GQA needs Hq % Hkv == 0 and equal kv heads: {shapes}")
        groups = hq // hkv
        # query head h uses kv head h // G (torch's repeat_interleave).
        k = np.repeat(k, groups, axis=-3)  # (..., Hq, S, E)
        v = np.repeat(v, groups, axis=-3)  # (..., Hq, S, Ev)

    if scale is None:
        if E == 0:
            raise ValueError("E == 0 needs an explicit scale")
        scale = 1.0 / math.sqrt(E)

    allowed = allowed_mask(
        L,
        S,
        is_causal=is_causal,
        causal_alignment=causal_alignment,
        window=window,
        q_offset=q_offset,
        kv_offset=kv_offset,
    )  # (L, S)
    bias = np.float64(0.0)
    if attn_mask is not None:
        mask = np.asarray(attn_mask)
        if mask.dtype == np.bool_:
            allowed = allowed & mask
        else:
            bias = mask.astype(np.float64)
            allowed = allowed & (bias != -np.inf)  # decided before rounding
            bias = rnd(bias)

    drop = np.float64(1.0)
    if dropout_keep is not None:
        factor = 0.0 if dropout_p >= 1.0 else 1.0 / (1.0 - dropout_p)
        drop = np.asarray(dropout_keep, dtype=bool) * factor

    full = np.broadcast_shapes(
        (*q.shape[:-2], L, S),
        (*k.shape[:-2], L, S),
        (*v.shape[:-2], L, S),
        allowed.shape,
        bias.shape,
        drop.shape,
    )  # (*batch, L, S)
    allowed = np.broadcast_to(allowed, full)
    q_idx = (q_offset + np.arange(L))[:, None]
    kv_idx = (kv_offset + np.arange(S))[None, :]
    return _Problem(
        q, k, v, allowed, bias, drop, float(scale), groups, score_mod, q_idx, kv_idx, shapes
    )


def _forward(p: _Problem, rnd: Rounder) -> tuple[Result, np.ndarray]:
    """Safe softmax attention; also returns the probabilities before dropout.

    ``rnd`` is applied after every step (identity for float64).
    """
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        raw = rnd(p.q @ np.swapaxes(p.k, -1, -2))  # (..., L, S)
        s = rnd(raw * p.scale)
        if p.score_mod is not None:
            heads = np.arange(p.q.shape[-3] if p.q.ndim >= 3 else 1)
            head = heads[:, None, None] if p.q.ndim >= 3 else heads[:, None]
            s = rnd(p.score_mod(s, p.q_idx, p.kv_idx, head))
        s = rnd(s + p.bias)
        s = np.where(p.allowed, s, -np.inf)  # (*batch, L, S); never s + (-inf)
        m = s.max(axis=-1, keepdims=True, initial=-np.inf)  # (*batch, L, 1)
        m_safe = np.where(m == -np.inf, 0.0, m)
        e = rnd(np.exp(rnd(s - m_safe)))  # 0 at masked positions
        denom = rnd(e.sum(axis=-1, keepdims=True))  # (*batch, L, 1)
        has_key = denom > 0
        probs = np.where(has_key, rnd(e / np.where(has_key, denom, 1.0)), 0.0)
        lse = rnd(m_safe + rnd(np.log(denom)))[..., 0]  # log(0) = -inf: empty row
        weights = rnd(probs * p.drop)  # (*batch, L, S)
        out = rnd(_masked_matmul(weights, p.v, p.allowed))  # (*batch, L, Ev)
    return Result(out, weights, lse, p.allowed), probs


def attention(
    query: Any,
    key: Any,
    value: Any,
    *,
    attn_mask: Any = None,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    causal_alignment: str = "top_left",
    window: Window = None,
    q_offset: int = 0,
    kv_offset: int = 0,
    dropout_keep: Any = None,
    dropout_p: float = 0.0,
    score_mod: Any = None,
) -> Result:
    """Float64 scaled dot-product attention (see the module docstring).

    query (..., Hq, L, E), key (..., Hkv, S, E), value (..., Hkv, S, Ev);
    attn_mask bool (True = may attend) or additive float, broadcastable to
    (..., Hq, L, S); dropout_keep bool broadcastable to (..., Hq, L, S).
    Returns a :class:`Result` over the broadcast of all leading dims.
    """
    p = _prepare(
        query,
        key,
        value,
        attn_mask=attn_mask,
        is_causal=is_causal,
        scale=scale,
        enable_gqa=enable_gqa,
        causal_alignment=causal_alignment,
        window=window,
        q_offset=q_offset,
        kv_offset=kv_offset,
        dropout_keep=dropout_keep,
        dropout_p=dropout_p,
        score_mod=score_mod,
    )
    return _forward(p, _identity)[0]


def attention_grad(
    query: Any, key: Any, value: Any, grad_out: Any, **kwargs: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Analytic gradients of ``sum(out * grad_out)`` w.r.t. query, key, value.

    Takes the keyword arguments of :func:`attention`. grad_out broadcasts to
    out (..., Hq, L, Ev). Returns dq, dk, dv with the shapes of query, key and
    value (broadcast dims and GQA head groups summed). Masked positions and
    empty rows contribute exactly 0.
    """
    p = _prepare(query, key, value, **kwargs)
    res, probs = _forward(p, _identity)  # probs P (*batch, L, S)
    allowed_t = np.swapaxes(p.allowed, -1, -2)  # (*batch, S, L)
    d_out = np.broadcast_to(np.asarray(grad_out, dtype=np.float64), res.out.shape)
    with np.errstate(invalid="ignore", over="ignore"):
        # out = (P * D) @ V, with D the dropout factor.
        dv = _masked_matmul(np.swapaxes(res.weights, -1, -2), d_out, allowed_t)
        dp = np.where(p.allowed, d_out @ np.swapaxes(p.v, -1, -2), 0.0) * p.drop
        ds = probs * (dp - np.sum(dp * probs, axis=-1, keepdims=True))  # (*b, L, S)
        dq = p.scale * _masked_matmul(ds, p.k, p.allowed)  # (*batch, L, E)
        dk = p.scale * _masked_matmul(np.swapaxes(ds, -1, -2), p.q, allowed_t)

    def fold(grad: np.ndarray) -> np.ndarray:
        """(..., Hq, S, X) -> (..., Hkv, S, X): sum the G heads per kv head."""
        if p.groups == 1:
            return grad
        hkv = grad.shape[-3] // p.groups
        grouped = grad.reshape(*grad.shape[:-3], hkv, p.groups, *grad.shape[-2:])
        return grouped.sum(axis=-3)  # (..., Hkv, S, X)

    q_shape, k_shape, v_shape = p.shapes
    return _sum_to(dq, q_shape), _sum_to(fold(dk), k_shape), _sum_to(fold(dv), v_shape)


def merge(outs: Sequence[Any], lses: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Combine attention over disjoint key sets.

    outs: pieces (..., L, Ev); lses: pieces (..., L). Returns out (..., L, Ev)
    and lse (..., L). A piece with ``lse = -inf`` contributes nothing; a row
    empty in every piece gives out 0 and lse -inf.
    """
    if len(outs) != len(lses) or not outs:
        raise ValueError("merge needs the same, non-zero number of outs and lses")
    o = np.stack(np.broadcast_arrays(*(np.asarray(x, np.float64) for x in outs)))
    lse = np.stack(np.broadcast_arrays(*(np.asarray(x, np.float64) for x in lses)))
    # o (P, ..., L, Ev); lse (P, ..., L)
    with np.errstate(invalid="ignore", divide="ignore"):
        m = lse.max(axis=0)  # (..., L)
        m_safe = np.where(m == -np.inf, 0.0, m)
        w = np.exp(lse - m_safe)  # (P, ..., L); 0 for an empty piece
        total = w.sum(axis=0)  # (..., L)
        coef = np.where(total > 0, w / np.where(total > 0, total, 1.0), 0.0)
        present = (lse > -np.inf)[..., None]  # (P, ..., L, 1)
        out = np.where(present, coef[..., None] * o, 0.0).sum(axis=0)
        return out, m_safe + np.log(total)


_NUMPY_FLOATS = {"float16": np.float16, "float32": np.float32, "float64": np.float64}


def _round_bfloat16(x: np.ndarray) -> np.ndarray:
    """Round float64 to bfloat16 (round to nearest even), by float32 bits."""
    with np.errstate(over="ignore", invalid="ignore"):
        f = x.astype(np.float32)
        # float64 -> float32 with round-to-odd, so that the second rounding
        # (float32 -> bfloat16) cannot double-round: truncate, then set the
        # last bit of every inexact result.
        bits = f.view(np.uint32)
        inexact = f.astype(np.float64) != x
        too_big = np.abs(f.astype(np.float64)) > np.abs(x)
        bits = np.where(inexact & too_big, bits - np.uint32(1), bits)
        bits = np.where(inexact, bits | np.uint32(1), bits).astype(np.uint64)
    # Round to nearest even on the upper 16 bits (inf stays inf; overflow to inf).
    lsb = (bits >> np.uint64(16)) & np.uint64(1)
    rounded = (bits + np.uint64(0x7FFF) + lsb) & np.uint64(0xFFFF0000)
    quiet_nan = (bits | np.uint64(0x00400000)) & np.uint64(0xFFFF0000)
    rounded = np.where(np.isnan(x), quiet_nan, rounded).astype(np.uint32)
    return rounded.view(np.float32).astype(np.float64)


def round_to(x: Any, dtype_name: str) -> np.ndarray:
    """Round to ``dtype_name`` ("float16", "bfloat16", "float32", "float64").

    Returns a float64 array (same shape) of values exactly representable in
    that format.
    """
    x = np.asarray(x, dtype=np.float64)
    if dtype_name == "bfloat16":
        return _round_bfloat16(x)
    if dtype_name not in _NUMPY_FLOATS:
        raise ValueError(f"unknown dtype_name {dtype_name!r}")
    with np.errstate(over="ignore"):
        return x.astype(_NUMPY_FLOATS[dtype_name]).astype(np.float64)


def attention_lowp(query: Any, key: Any, value: Any, dtype_name: str, **kwargs: Any) -> Result:
    """The same formula as :func:`attention`, rounded to ``dtype_name`` after
    every step (inputs, mask, scores, scaled scores, max-subtraction, exp, row
    sum, division, lse, dropout, output): a naive low-precision baseline.

    The scale is applied as an unrounded Python float, as frameworks do.
    Takes the keyword arguments of :func:`attention`; shapes as there.
    """

    def rnd(a: np.ndarray) -> np.ndarray:
        return round_to(a, dtype_name)

    rnd(np.zeros(0))  # reject an unknown dtype_name early
    return _forward(_prepare(query, key, value, rnd=rnd, **kwargs), rnd)[0]
