"""The executor's operands: the GQA layout, the compute dtype, the masks' two forms, and
which guards and exact shortcuts a call needs.

The two shortcuts:

- **no row maximum** (``shift_free``): when ``scale * max_i |q_i| * max_j |k_j|``
  (Cauchy-Schwarz) proves no exp can overflow or turn subnormal, the softmax needs no
  maximum subtracted: the same function;
- **row sums from the value product** (``value_ones``): without weights or dropout,
  ``e @ [v | 1]`` gives ``e @ v`` and the row sums in one product.

The bound is decided on concrete values only (never under ``jax.jit``) and only where L
and S are at least 2E.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..nan_guard import all_finite
from ..problem import Problem, gqa_layout
from ..shapes import broadcast_shapes, prod

__all__ = ["Prepared", "empty_result", "prepare_operands", "scores_bounded", "shift_free_limit"]


@dataclass(frozen=True)
class Prepared:
    """One call's operands in the compute dtype and the GQA layout (:func:`gqa_layout`)."""

    query: Any  # (..., L, E), not yet multiplied by scale (each block scales its rows)
    key: Any  # (..., S, E)
    value: Any  # (..., S, Ev)
    allowed_mask: Any  # bool form of attn_mask (True = may attend), or None
    additive: Any  # additive attn_mask in the compute dtype, or None
    lead: tuple[int, ...]  # broadcast leading dims of all operands
    tile_cache: dict[Any, Any]  # per-call tiles by block shape (translation-invariant masks)
    shift_free: bool = False  # every score provably in [-T, T]: exp without the row max
    value_ones: Any = None  # (..., S, Ev + 1): value with a column of ones, or None
    finite: bool = True  # nothing masked, or q, k and v checked finite: no guard needed


def prepare_operands(p: Problem, kernels: Any, shortcuts: bool = False) -> Prepared:
    """Cast to the compute dtype, regroup GQA heads, and decide the guards and shortcuts.

    Where some (query, key) pair is masked and the operands are not known to be finite
    (a concrete check found NaN or inf, or the values are traced under ``jax.jit``), each
    block zeroes what its rows may not touch (:func:`attnkit.nan_guard.neutralize`).
    ``shortcuts=True`` (no weights or dropout) decides the shortcuts; ``kernels``
    (the backend's block kernels, or None) say whether the block kernel reads them.
    """
    xp, cd = p.xp, p.compute_dtype
    q, k, v, mask = (p.query, p.key, p.value, p.mask) if p.gqa_groups == 1 else gqa_layout(p)
    if q.dtype != cd:
        q, k, v = xp.astype(q, cd), xp.astype(k, cd), xp.astype(v, cd)
    allowed_mask, additive = None, None
    if mask is not None:
        if p.mask_is_bool:
            allowed_mask = mask
        else:
            additive = mask if mask.dtype == cd else xp.astype(mask, cd)
            allowed_mask = additive != -math.inf
    masked = mask is not None or p.structure is not None
    finite = True if not masked else all_finite(p, q, k, v)
    shapes = [q.shape[:-2], k.shape[:-2], v.shape[:-2]]
    if mask is not None:
        shapes.append(mask.shape[:-2])
    lead = broadcast_shapes(*shapes)
    assert lead is not None, "validated shapes must broadcast"
    shift_free, value_ones = False, None
    block = None if kernels is None else kernels.block
    if shortcuts and p.L and p.S:
        if block is None or kernels.block_reads_shift_free:
            shift_free = additive is None and p.score_mod is None and scores_bounded(p, q, k)
        # [v | 1] is a copy of v: worth it where every block reads all keys, eagerly only
        # (under jax.jit XLA's own fusion is faster); a window's blocks sum their few keys
        if block is None and shift_free and p.structure is None:
            ones = xp.ones((*v.shape[:-1], 1), dtype=v.dtype, device=p.device)
            value_ones = xp.concat([v, ones], axis=-1)  # (..., S, Ev + 1)
    return Prepared(
        q, k, v, allowed_mask, additive, lead, {}, shift_free, value_ones, finite is True
    )


def empty_result(
    p: Problem, lead: tuple[int, ...], rows: int, need_weights: bool
) -> tuple[Any, Any, Any]:
    """(out 0, weights 0 or None, lse -inf) for ``rows`` query rows with no key in reach.

    The zeros are tied to the inputs by a sum over an empty slice of each (exactly 0, no
    NaN even where the inputs hold NaN), so autograd sees the output depend on query,
    key and value: ``out.sum().backward()`` gives zero gradients rather than an error."""
    xp, cd = p.xp, p.compute_dtype
    tie = xp.sum(p.query[..., :0]) + xp.sum(p.key[..., :0]) + xp.sum(p.value[..., :0])
    tie = tie if tie.dtype == cd else xp.astype(tie, cd)
    out = xp.zeros((*lead, rows, p.Ev), dtype=cd, device=p.device) + tie
    lse = xp.full((*lead, rows), -math.inf, dtype=cd, device=p.device)
    weights = xp.zeros((*lead, rows, p.S), dtype=cd, device=p.device) if need_weights else None
    return out, weights, lse


def shift_free_limit(dtype_info: Any, S: int) -> float:
    """The largest T such that scores in [-T, T] need no max subtraction: S * exp(T)
    stays 2**-3 below the largest float and exp(-T) stays 2**3 above the smallest normal
    number (so no exp overflows, underflows or loses precision to subnormals)."""
    top = math.log(dtype_info.max) - math.log(max(S, 1)) - 3 * math.log(2)
    bottom = -math.log(dtype_info.smallest_normal) - 3 * math.log(2)
    return min(top, bottom)


def scores_bounded(p: Problem, q: Any, k: Any) -> bool:
    """Whether |scale * q_i . k_j| <= shift_free_limit for all pairs, by Cauchy-Schwarz
    (scale^2 max_i |q_i|^2 max_j |k_j|^2 <= T^2; NaN or inf fails the test). Decided on
    concrete values only: under tracing (jax.jit) it is False. Skipped (False) for short
    query or key axes, where the norms would cost more than the passes they save."""
    if min(p.L, p.S) < 2 * q.shape[-1]:
        return False
    xp = p.xp
    try:
        q_sq = _max_square_norm(xp, q, p.backend.concrete_float)  # max_i |q_i|^2
        k_sq = _max_square_norm(xp, k, p.backend.concrete_float)  # max_j |k_j|^2
    except (TypeError, RuntimeError, ValueError):  # traced: no concrete value (jax.jit)
        return False
    limit = shift_free_limit(xp.finfo(q.dtype), p.S)
    return p.scale * p.scale * q_sq * k_sq <= limit * limit


def _max_square_norm(xp: Any, x: Any, to_float: Any) -> float:
    """max over rows of |x_r|^2 for x (..., N, E), NaN if any is NaN, read 2**21 elements
    at a time: a backend's vecdot may build the (..., N, E) product first, and a
    temporary over 32 MiB is fresh, page-faulted memory on every call."""
    n = x.shape[-2]
    rows = max(1, (2**21) // max(1, prod(x.shape[:-2]) * x.shape[-1]))
    best = -math.inf
    for lo in range(0, n, rows):
        part = x[..., lo : min(lo + rows, n), :]  # (..., <= rows, E)
        value = to_float(xp.max(xp.vecdot(part, part)))
        if math.isnan(value):
            return value
        best = max(best, value)
    return best
