"""One block of query rows: the plain formula, and the exact shortcuts as variants of it.

For rows [q_lo, q_hi) against the key columns their structure allows (the block's
tile), in the compute dtype::

    scores  = (q * scale) @ k^T + additive_mask          # (..., Bq, Sk)
    weights = softmax(where(allowed, scores, -inf))      # 0 on empty rows
    out     = dropout(weights) @ v                       # (..., Bq, Ev)

:func:`block_formula` is exactly this; every block of the array-API path runs it
(:func:`attend_block` -> :func:`attend_tile`, unless a backend kernel takes the block).
Without weights or dropout it ends in one of two named optimisations (same result, fewer
passes over the scores): :func:`normalized_after` (``(e @ v) / denom``) or
:func:`with_row_sums` (``e @ [v | 1]``); either skips the row maximum where the scores
are provably small (:mod:`.operands`).
"""

from __future__ import annotations

from typing import Any

from ..dropout import apply_dropout
from ..nan_guard import neutralize, weighted_values
from ..problem import Problem
from ..score_mods import apply_score_mod
from ..softmax import masked_softmax, softmax_denominator, softmax_numerator, softmax_parts
from .operands import Prepared, empty_result
from .tiles import block_plan, kernel_mask, scatter_columns, select_rows

__all__ = ["attend_block", "attend_tile", "block_formula", "block_values", "normalized_after",
           "tile_scores", "with_row_sums"]  # fmt: skip


def block_formula(p: Problem, ops: Prepared, t: Any, q: Any, k: Any, v: Any, allowed: Any,
                  stream: int, need_weights: bool) -> tuple[Any, Any, Any]:  # fmt: skip
    """The plain formula on one tile: (out (..., Bq, Ev), weights (..., Bq, Sk) or None, lse)."""
    _, _, scores = tile_scores(p, ops, t, q, k)  # (..., Bq, Sk)
    if not (need_weights or p.dropout_p > 0):
        if ops.value_ones is not None and ops.finite:  # v is [v | 1] (block_values)
            return with_row_sums(p, ops, scores, allowed, v)
        return normalized_after(p, ops, scores, allowed, v)
    weights, lse = masked_softmax(p.xp, scores, allowed)  # (..., Bq, Sk), (..., Bq)
    if p.dropout_p > 0:
        weights = apply_dropout(p, weights, stream)
    out = weights @ v if ops.finite else weighted_values(p, weights, v)  # (..., Bq, Ev)
    return out, weights, lse


def normalized_after(p: Problem, ops: Prepared, scores: Any, allowed: Any, v: Any) -> Any:
    """:func:`block_formula`'s end normalizing after the value product: (e @ v) / denom."""
    maskable = allowed is not None or ops.additive is not None
    e, denom, lse = softmax_parts(p.xp, scores, allowed, maskable, ops.shift_free)
    ev = e @ v if ops.finite else weighted_values(p, e, v)  # (..., Bq, Ev)
    return ev / denom, None, lse


def with_row_sums(p: Problem, ops: Prepared, scores: Any, allowed: Any, v: Any) -> Any:
    """:func:`normalized_after` with the row sums from the value product: e @ [v | 1]."""
    xp, maskable = p.xp, allowed is not None or ops.additive is not None
    e, row_max = softmax_numerator(xp, scores, allowed, maskable, ops.shift_free)
    both = e @ v  # (..., Bq, Ev + 1): e @ v and the row sums of e in one product
    denom, lse = softmax_denominator(xp, both[..., p.Ev :], row_max, maskable)
    return both[..., : p.Ev] / denom, None, lse  # (..., Bq, Ev)


def tile_scores(p: Problem, ops: Prepared, t: Any, q: Any, k: Any) -> tuple[Any, Any, Any]:
    """(raw, modified, scores) of a tile (..., Bq, Sk): raw = (q * scale) @ k^T (scaled
    block by block), modified = score_mod(raw) with the tile's positions, scores =
    modified + the additive mask's tile. The forward reads ``scores``; the backward
    also ``raw`` and ``modified`` (the score modifier's derivative)."""
    xp = p.xp
    raw = (q * p.scale) @ xp.matrix_transpose(k)  # (..., Bq, Sk)
    modified = raw
    if p.score_mod is not None:
        modified = apply_score_mod(p.score_mod, xp, raw, t, p.num_heads, p.gqa_groups)
    scores = modified
    if ops.additive is not None:
        scores = scores + t.columns(t.rows(ops.additive))
    return raw, modified, scores


def attend_block(
    p: Problem,
    ops: Prepared,
    kernels: Any,
    q_lo: int,
    q_hi: int,
    stream: int,
    need_weights: bool,
    plan: tuple[Any, Any] | None = None,
) -> tuple[Any, Any, Any]:
    """Attention for query rows [q_lo, q_hi): (out (..., Bq, Ev), weights or None, lse).

    Only the key columns the structure allows are read; weights, when asked for, span all
    S columns (zeros elsewhere). ``kernels``: the backend's kernels to use (None: the
    array-API arithmetic only). ``plan``: :func:`.tiles.block_plan`'s result when the
    caller computed it already. A kernel's block gives no lse (None).
    """
    xp = p.xp
    t, allowed = block_plan(p, ops, q_lo, q_hi) if plan is None else plan  # allowed (..., Bq, Sk)
    if t is None:  # no key in reach: an empty block
        return empty_result(p, ops.lead, q_hi - q_lo, need_weights)
    q = ops.query[..., q_lo:q_hi, :]  # (..., Bq, E)
    k = select_rows(xp, ops.key, t.ranges)  # (..., Sk, E)
    v = select_rows(xp, block_values(p, ops, need_weights), t.ranges)  # (..., Sk, Ev[+1])
    return attend_tile(p, ops, kernels, t, allowed, q, k, v, stream, need_weights)


def block_values(p: Problem, ops: Prepared, need_weights: bool) -> Any:
    """The value rows a block reads: (..., S, Ev), or (..., S, Ev + 1) with a column of
    ones where :func:`attend_tile` takes the row sums from the value product."""
    plain = not (need_weights or p.dropout_p > 0)
    return ops.value_ones if (ops.value_ones is not None and plain and ops.finite) else ops.value


def attend_tile(
    p: Problem,
    ops: Prepared,
    kernels: Any,
    t: Any,
    allowed: Any,
    q: Any,
    k: Any,
    v: Any,
    stream: int,
    need_weights: bool,
) -> tuple[Any, Any, Any]:
    """:func:`attend_block` on its tile's operands: q (..., Bq, E), k (..., Sk, E), v
    (..., Sk, Ev) or (..., Sk, Ev + 1) (:func:`block_values`), ``allowed`` (..., Bq, Sk)
    or None. Returns (out (..., Bq, Ev), weights or None, lse (..., Bq) or None). The
    executor's loop hook (``Backend.map_blocks``) runs it on slices of uniform blocks."""
    xp = p.xp
    if allowed is not None and not ops.finite:
        q, k, v = neutralize(xp, q, k, v, allowed)
    block = None if kernels is None else kernels.block
    if p.need_lse and kernels is not None and kernels.block_lse is not None and ops.finite:
        mask = kernel_mask(p, ops, t, allowed, kernels.block_wants_additive)
        both = kernels.block_lse(q, k, v, mask, p.scale)  # (out, lse): a saving forward
        if both is not None:
            return both[0], None, both[1]
    elif block is not None and (ops.finite or kernels.block_masks_nonfinite):
        mask = kernel_mask(p, ops, t, allowed, kernels.block_wants_additive)
        out = block(q, k, v, mask, p.scale, ops.shift_free)
        if out is not None:
            return out, None, None
    out, weights, lse = block_formula(p, ops, t, q, k, v, allowed, stream, need_weights)
    if need_weights:
        weights = scatter_columns(xp, weights, t.ranges, p.S, p.device)  # (..., Bq, S)
    return out, (weights if need_weights else None), lse
