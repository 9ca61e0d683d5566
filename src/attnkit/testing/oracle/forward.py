"""The oracle's forward pass: float64 attention, and the same formula rounded to a low
precision after every step (a naive baseline for the float16/bfloat16 tolerances).

Shapes and the position rules: :mod:`attnkit.testing.oracle`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .rounding import round_to

__all__ = ["Result", "allowed_mask", "attention", "attention_lowp"]

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
