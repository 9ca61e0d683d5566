"""Attention as one loop over the tile table: every call form, one body per kind of tile.

Each attended tile of the table (:mod:`.table`) computes a piece of attention over its
key block, merged into its query rows by the online softmax (packed [acc | m | l],
:func:`attnkit.merge.merge_packed`)::

    s   = score_mod((q_i * scale) @ k_j^T) + attn_mask tile     # (..., Bq, Bk)
    s   = where(allowed, s, -inf)        # partial tiles only
    m   = rowmax(s),  e = exp(s - m),  l = rowsum(e)
    acc = dropout(e) @ v_j                                       # (..., Bq, Ev)

At the end ``out = acc / l`` and ``lse = m + log l`` (0 and -inf on rows with no key).
Dropout draws from the tile's place in the grid, so the backward redraws it; tiles dead
at run time are skipped by the backend's ``select``.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from ..masks import LoopTile
from ..merge import finish_packed, merge_packed, no_keys
from ..nan_guard import neutralize, weighted_values
from ..problem import Problem
from ..softmax import softmax_numerator
from .block import tile_scores
from .operands import Prepared
from .table import TileTable
from .tile_body import (
    TileList,
    by_kind,
    device_of,
    pad_rows,
    run_tiles,
    tile_lead,
    tile_mask,
)
from .tile_weights import tile_weights

__all__ = ["tile_attention"]


def _piece(
    p: Problem, ops: Prepared, table: TileTable, lead: tuple[int, ...],
    at: tuple[Any, ...], q: Any, k: Any, v: Any, kind: int | None = None,
) -> tuple[Any]:  # fmt: skip
    """One tile's packed piece [acc | m | l] (*lead, Bq, Ev + 2); ``at`` is (query row,
    key row, value row, stream, kind)."""
    xp = p.xp
    shape = (*lead, table.rows, v.shape[-1] + 2)

    def compute(masked: bool, q: Any, k: Any, v: Any) -> Any:
        t = LoopTile(xp, p.device, p.geometry, at[0], table.rows, at[1], table.cols)
        allowed = tile_mask(p, ops, table, t) if masked else None
        if allowed is not None and not ops.finite:
            q, k, v = neutralize(xp, q, k, v, allowed)
        _, _, scores = tile_scores(p, ops, t, q, k)
        maskable = allowed is not None or ops.additive is not None
        e, row_max = softmax_numerator(xp, scores, allowed, maskable)  # (..., Bq, Bk)
        total = xp.sum(e, axis=-1, keepdims=True)  # (..., Bq, 1)
        m = xp.where(total == 0, -math.inf, row_max) if maskable else row_max
        if p.dropout_p > 0:
            keep_prob = 1.0 - p.dropout_p
            keep = p.backend.dropout_keep(p.rng, tuple(e.shape), keep_prob, like=e, stream=at[3])
            e = xp.where(keep, e / keep_prob, 0.0)
        acc = e @ v if ops.finite else weighted_values(p, e, v)  # (..., Bq, Ev)
        parts = [xp.broadcast_to(x, (*lead, table.rows, x.shape[-1])) for x in (acc, m, total)]
        return xp.concat(parts, axis=-1)

    full = functools.partial(compute, False)
    partial = functools.partial(compute, True)
    kind = at[-1] if kind is None else kind
    return (by_kind(p, kind, full, partial, functools.partial(_empty, xp, shape), q, k, v),)


def _empty(xp: Any, shape: tuple[int, ...], q: Any, k: Any, v: Any) -> Any:
    """A dead tile's piece: attention over no key."""
    return no_keys(xp, shape, q.dtype, device_of(q)) + xp.zeros(shape, dtype=q.dtype)


def tile_attention(
    p: Problem, ops: Prepared, table: TileTable, need_weights: bool
) -> tuple[Any, Any, Any, tuple[Any, Any]]:
    """(out (..., L, Ev), weights (..., L, S) or None, lse (..., L), (m, l)) of the call
    in the compute dtype and the GQA layout; ``(m, l)`` (..., L) each, the row maximum and
    the row sum of exp(s - m), are what the backward pass reads (exact weights
    exp(s - m) / l, whatever lse's rounding)."""
    xp = p.xp
    tiles = TileList(p, ops, table)
    Lp, Sp = tiles.padded_rows, table.padded_keys
    q, k, v = (pad_rows(xp, x, n) for x, n in ((ops.query, Lp), (ops.key, Sp), (ops.value, Sp)))
    lead = tile_lead(p, ops)
    packed = None
    for group, kind in tiles.groups():
        body = functools.partial(_piece, p, ops, table, lead, kind=kind)
        (piece,) = run_tiles(
            p,
            group,
            body,
            group.starts(p, 0),
            (q, k, v),
            (table.rows, table.cols, table.cols),
            merges=((0, Lp),),
        )  # fmt: skip  (*lead, Lp, Ev + 2)
        packed = piece if packed is None else merge_packed(packed, piece)
    if packed is None:  # no tile attended: every row has no key
        packed = no_keys(xp, (*lead, Lp, p.Ev + 2), ops.query.dtype, p.device)
    packed = packed[..., : p.L, :]
    out, lse = finish_packed(packed)  # (..., L, Ev), (..., L)
    m, total = packed[..., -2], packed[..., -1]
    weights = None
    if need_weights:
        weights = tile_weights(p, ops, table, tiles, lead, q, k, v, m, total)
    return out, weights, lse, (m, total)
