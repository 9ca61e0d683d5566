"""The backward pass over the tile table: the same tiles as the forward, in one loop.

For each attended tile (query block i, key block j), from the forward's row maximum
``m``, row sum ``l`` and D = rowsum(dO * O)::

    P    = where(allowed, exp(s - m) / l, 0)              # (..., Bq, Bk): the weights
    Pd   = dropout(P)      (the tile's stream, redrawn)
    dV_j += Pd^T dO_i
    dP   = dropout(dO_i V_j^T)
    dS   = P * (dP - D_i)                                 # d loss / d scores
    dR   = dS * score_mod'(raw)
    dQ_i += scale dR K_j,    dK_j += scale dR^T Q_i
    dM   = dS in the additive mask's shape

With the lse of a larger call (``whole_rows=False``: ring pieces), m = lse and l = 1.
Rows with nothing to attend (l = 0) get gradient 0. The loop is the forward's.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from ..masks import LoopTile
from ..nan_guard import neutralize
from ..problem import Problem
from .accumulate import sum_to_shape
from .backward import weight_grads
from .block import tile_scores
from .operands import Prepared
from .table import TileTable
from .tile_body import TileList, by_kind, pad_rows, run_tiles, tile_lead, tile_mask
from .tile_weights import assemble_tiles

__all__ = ["tile_backward"]


def tile_backward(
    p: Problem,
    ops: Prepared,
    table: TileTable,
    out: Any,
    stats: tuple[Any, Any],
    d_out: Any,
    mask_grad: bool = True,
) -> tuple[Any, Any, Any, Any]:
    """(dq, dk, dv, d_mask) in the GQA layout and the compute dtype, of the operands'
    layout shapes (``ops``); d_mask None unless ``attn_mask`` is additive and
    ``mask_grad``. ``out`` (..., L, Ev) the forward's output, ``stats`` its (m, l)
    (..., L) each, ``d_out`` the output's cotangent (..., L, Ev), all in that layout."""
    xp, cd = p.xp, p.compute_dtype
    R, C = table.rows, table.cols
    tiles = TileList(p, ops, table)
    Lp, Sp = tiles.padded_rows, table.padded_keys
    m, total = stats
    D = xp.sum(d_out * out, axis=-1)  # (..., L): rowsum(dO * O)
    lead = tile_lead(p, ops)
    rows = xp.stack([xp.broadcast_to(x, (*lead, p.L)) for x in (m, total, D)], axis=-1)
    rows = pad_rows(xp, rows, Lp)  # (*lead, Lp, 3): padded rows have l = 0 (dead)
    d_o = pad_rows(xp, xp.broadcast_to(d_out, (*lead, p.L, p.Ev)), Lp)  # (*lead, Lp, Ev)
    q, k, v = (pad_rows(xp, x, n) for x, n in ((ops.query, Lp), (ops.key, Sp), (ops.value, Sp)))
    mask_shape = None if ops.additive is None or not mask_grad else tuple(ops.additive.shape)
    shapes = (tuple(ops.query.shape), tuple(ops.key.shape), tuple(ops.value.shape))
    kind = None if mask_shape is None else _mask_piece(mask_shape)
    stacked_n = 1 if kind in ("grid", "whole") else 0
    sums = ((0, Lp), (1, Sp), (2, Sp), *(((0, Lp),) if kind == "rows" else ()),
            *(((1, Sp),) if kind == "cols" else ()))  # fmt: skip
    totals: list[Any] = []
    mask_parts: list[tuple[TileList, Any]] = []
    for group, group_kind in tiles.groups():
        body = functools.partial(_grads, p, ops, table, shapes, mask_shape, kind=group_kind)
        outs = run_tiles(
            p, group, body, group.starts(p, 2), (q, k, v, rows, d_o), (R, C, C, R, R), sums=sums
        )
        grads = list(outs[stacked_n : stacked_n + 3])
        totals = grads if not totals else [a + b for a, b in zip(totals, grads, strict=True)]
        if kind is not None:
            mask_parts.append((group, outs[0] if stacked_n else outs[-1]))
    if not totals:  # nothing attended: zero gradients
        totals = [xp.zeros(s, dtype=cd, device=p.device) for s in shapes]
    dq = sum_to_shape(xp, totals[0][..., : p.L, :], shapes[0])
    dk = sum_to_shape(xp, totals[1][..., : p.S, :], shapes[1])
    dv = sum_to_shape(xp, totals[2][..., : p.S, :], shapes[2])
    d_mask = None
    if mask_shape is not None:
        d_mask = _d_mask(p, table, mask_parts, mask_shape, cd)
    return dq, dk, dv, d_mask


def _mask_piece(mask_shape: tuple[int, ...]) -> str:
    """How a tile's dS reaches the additive mask (..., L|1, S|1): placed in the grid
    (rows and columns), added into rows, into columns, or summed whole."""
    rows, cols = mask_shape[-2] != 1, mask_shape[-1] != 1
    return {(True, True): "grid", (True, False): "rows", (False, True): "cols"}.get(
        (rows, cols), "whole"
    )


def _grads(
    p: Problem, ops: Prepared, table: TileTable,
    shapes: tuple[tuple[int, ...], ...], mask_shape: tuple[int, ...] | None,
    at: tuple[Any, ...], q: Any, k: Any, v: Any, rows: Any, dO: Any, kind: int | None = None,
) -> tuple[Any, ...]:  # fmt: skip
    """One tile's (dq (.., R, E), dk (.., C, E), dv (.., C, Ev)) summed to the operands'
    heads, and its dS in the mask's shape where asked: first (stacked) for a mask of
    rows and columns or of neither, last (added into rows or columns) otherwise."""
    xp = p.xp
    R, C = table.rows, table.cols
    q_shape, k_shape, v_shape = shapes
    tile_kind = at[-1] if kind is None else kind
    kind = None if mask_shape is None else _mask_piece(mask_shape)
    shaped = [
        (*q_shape[:-2], R, q_shape[-1]),
        (*k_shape[:-2], C, k_shape[-1]),
        (*v_shape[:-2], C, v_shape[-1]),
    ]
    if kind is not None:
        piece = {"grid": (R, C), "rows": (R, 1), "cols": (C, 1), "whole": (1, 1)}[kind]
        shaped.append((*mask_shape[:-2], *piece))
    first = kind in ("grid", "whole")  # the mask's piece is stacked: it comes first

    def compute(masked: bool, q: Any, k: Any, v: Any, rows: Any, dO: Any) -> tuple[Any, ...]:
        t = LoopTile(xp, p.device, p.geometry, at[0], R, at[1], C)
        allowed = tile_mask(p, ops, table, t) if masked else None
        if allowed is not None and not ops.finite:
            q, k, v = neutralize(xp, q, k, v, allowed)
        raw, modified, scores = tile_scores(p, ops, t, q, k)
        m, total, D = rows[..., 0:1], rows[..., 1:2], rows[..., 2:3]  # (..., R, 1)
        live = (total != 0) & (m != -math.inf)
        P = xp.exp(scores - xp.where(live, m, 0.0)) / xp.where(live, total, 1.0)
        keep = live if allowed is None else (allowed & live)
        P = xp.where(keep, P, 0.0)  # (..., R, C): the forward's weights
        dq, dk, dv, dS = weight_grads(p, ops, t, raw, modified, P, q, k, v, dO, D, at[5])
        grads = [sum_to_shape(xp, g, s) for g, s in zip((dq, dk, dv), shaped, strict=False)]
        if kind is not None:
            piece = xp.matrix_transpose(dS) if kind == "cols" else dS  # cols: (.., C, R)
            grads.append(sum_to_shape(xp, piece, shaped[3]))
        return (grads[3], *grads[:3]) if first else tuple(grads)

    order = [shaped[3], *shaped[:3]] if first else shaped
    full, partial = functools.partial(compute, False), functools.partial(compute, True)
    zero = functools.partial(_zeros, xp, order)
    return by_kind(p, tile_kind, full, partial, zero, q, k, v, rows, dO)


def _zeros(xp: Any, shapes: list[tuple[int, ...]], q: Any, *rest: Any) -> tuple[Any, ...]:
    """A dead tile's gradients: zeros of the body's output shapes."""
    return tuple(xp.zeros(s, dtype=q.dtype) for s in shapes)


def _d_mask(
    p: Problem, table: TileTable, parts: list[tuple[TileList, Any]], shape: tuple[int, ...],
    cd: Any,
) -> Any:  # fmt: skip
    """The additive mask's gradient in its (GQA layout) shape from the loops' pieces: the
    tiles' dS placed in the grid, or added by rows or columns, or summed whole."""
    xp = p.xp
    kind = _mask_piece(shape)
    if not parts:
        return xp.zeros(shape, dtype=cd, device=p.device)
    if kind in ("rows", "cols", "whole"):
        total = None
        for _, part in parts:
            part = xp.sum(part, axis=-2, keepdims=True) if kind == "whole" else part
            total = part if total is None else total + part
        if kind == "rows":
            return total[..., : p.L, :]  # (..., L, 1)
        if kind == "cols":
            return xp.matrix_transpose(total[..., : p.S, :])  # (..., 1, S)
        return total  # (..., 1, 1)
    lead = shape[:-2]
    stacked, index, base = [], [None] * (table.n_q * table.n_k), 0
    for group, part in parts:
        stacked.append(xp.reshape(part, (*lead, len(group.tiles), table.rows, table.cols)))
        for n, (i, j) in enumerate(group.tiles):
            if i < table.n_q:  # a spare tile is dropped
                index[i * table.n_k + j] = base + n
        base += len(group.tiles)
    return assemble_tiles(p, table, stacked, index, lead, cd)[..., : p.L, : p.S]
