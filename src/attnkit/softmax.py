"""Softmax over the key axis that stays finite on rows with nothing to attend.

The textbook ``exp(s - max(s)) / sum(exp(s - max(s)))`` gives NaN on a row whose scores
are all -inf (max = -inf, and -inf - -inf = NaN): pytorch#41508. Here such a row gives
weights 0 and log-sum-exp -inf, and its gradient is 0, never NaN.
"""

from __future__ import annotations

import math
from typing import Any

from array_api_compat import device as _device

__all__ = ["masked_softmax", "softmax_denominator", "softmax_numerator", "softmax_parts"]


def masked_softmax(xp: Any, scores: Any, allowed: Any) -> tuple[Any, Any]:
    """Softmax of ``scores`` (..., L, S) over S where ``allowed``; returns (weights, lse).

    ``allowed`` is a bool array broadcastable to ``scores`` or None (all allowed).
    Masked positions never influence anything, even where their score is NaN or inf::

        s = where(allowed, scores, -inf)
        weights = exp(s - lse)       # 0 on masked positions and on empty rows
        lse = log(sum(exp(s)))       # (..., L); -inf on empty rows
    """
    e, denom, lse = softmax_parts(xp, scores, allowed)
    return e / denom, lse


def softmax_parts(
    xp: Any, scores: Any, allowed: Any, maskable: bool = True, shift_free: bool = False
) -> tuple[Any, Any, Any]:
    """The unnormalized softmax of ``scores`` (..., L, S): returns (e, denom, lse).

    ``weights = e / denom``; ``denom`` (..., L, 1) is 1 on rows with nothing to attend
    (where ``e`` is all 0), so the division never makes NaN. Dividing the (..., L, Ev)
    product ``e @ v`` by ``denom`` instead of the (..., L, S) ``e`` saves a pass over
    the scores. ``maskable=False`` promises that no score is -inf (no mask at all), which
    skips the guards for empty rows. ``shift_free=True`` promises that every finite score
    is small enough for exp to need no row maximum subtracted (see
    :func:`attnkit.blocked.operands.shift_free_limit`): one pass fewer over the scores.
    """
    if scores.shape[-1] == 0:  # S = 0: every row is empty (max has no identity)
        if allowed is not None:
            scores = xp.where(allowed, scores, -math.inf)
        lse = xp.full(scores.shape[:-1], -math.inf, dtype=scores.dtype, device=_device(scores))
        return (
            scores,
            xp.ones((*scores.shape[:-1], 1), dtype=scores.dtype, device=_device(scores)),
            lse,
        )
    e, row_max = softmax_numerator(xp, scores, allowed, maskable, shift_free)
    denom = xp.sum(e, axis=-1, keepdims=True)  # (..., L, 1), 0 on empty rows
    safe_denom, lse = softmax_denominator(xp, denom, row_max, maskable)
    return e, safe_denom, lse


def softmax_numerator(
    xp: Any, scores: Any, allowed: Any, maskable: bool = True, shift_free: bool = False
) -> tuple[Any, Any]:
    """``(e, row_max)``: e = exp(where(allowed, scores, -inf) - row_max) (..., L, S), with
    row_max (..., L, 1) the row maximum (any finite value on empty rows), or None under
    ``shift_free`` (nothing subtracted). S must be > 0."""
    if allowed is not None:
        scores = xp.where(allowed, scores, -math.inf)
    if shift_free:
        return xp.exp(scores), None  # (..., L, S), exactly 0 where masked
    row_max = xp.max(scores, axis=-1, keepdims=True)  # (..., L, 1)
    if maskable:
        row_max = xp.where(row_max == -math.inf, 0.0, row_max)  # empty rows: any finite value
    return xp.exp(scores - row_max), row_max  # (..., L, S), exactly 0 where masked


def softmax_denominator(
    xp: Any, denom: Any, row_max: Any, maskable: bool = True
) -> tuple[Any, Any]:
    """``(safe_denom, lse)`` from the row sums ``denom`` (..., L, 1) of
    :func:`softmax_numerator`'s ``e``: safe_denom is 1 where the sum is 0 (empty rows),
    lse (..., L) is row_max + log(denom), -inf on empty rows (NaN where the sum is NaN)."""
    if not maskable:
        lse = xp.log(denom) if row_max is None else row_max + xp.log(denom)
        return denom, lse[..., 0]
    # Empty means a sum of exactly 0; a NaN sum (the row attends a NaN score) stays NaN,
    # in the weights and in the lse alike.
    nonempty = denom != 0
    safe_denom = xp.where(nonempty, denom, 1.0)
    # The double where keeps the gradient of lse finite on empty rows (log 0 = -inf).
    log_denom = xp.log(safe_denom) if row_max is None else row_max + xp.log(safe_denom)
    lse = xp.where(nonempty, log_denom, -math.inf)[..., 0]  # (..., L)
    return safe_denom, lse
