"""The weights of a call on request, from a second loop over its tile table.

With the forward's row maximum m and row sum l, each attended tile's weights are
``where(allowed, exp(s - m) / l, 0)`` (dropout as the forward drew it), placed in their
cells of the (..., L, S) grid, zeros elsewhere.
"""

from __future__ import annotations

import functools
from typing import Any

from ..masks import LoopTile
from ..nan_guard import neutralize
from ..problem import Problem
from .block import tile_scores
from .operands import Prepared
from .table import TileTable
from .tile_body import TileList, by_kind, device_of, pad_rows, run_tiles, tile_mask

__all__ = ["assemble_tiles", "tile_weights"]


def tile_weights(
    p: Problem, ops: Prepared, table: TileTable, tiles: TileList, lead: tuple[int, ...],
    q: Any, k: Any, v: Any, m: Any, total: Any,
) -> Any:  # fmt: skip
    """The weights applied (..., L, S): exp(s - m) / l on every attended tile (dropout
    applied as in the forward), zeros elsewhere, from a second loop over the table."""
    xp = p.xp
    R, C = table.rows, table.cols
    if not tiles.tiles:  # no tile attended (or S = 0): every weight is 0
        return xp.zeros((*lead, p.L, p.S), dtype=ops.query.dtype, device=p.device)
    ml = pad_rows(xp, xp.stack([m, total], axis=-1), tiles.padded_rows)  # (*lead, Lp, 2)
    stacked, index = [], [None] * (table.n_q * table.n_k)
    base = 0
    for group, kind in tiles.groups():
        body = functools.partial(_weight_tile, p, ops, table, lead, kind=kind)
        (w,) = run_tiles(p, group, body, group.starts(p, 1), (q, k, v, ml), (R, C, C, R))
        stacked.append(xp.reshape(w, (*lead, len(group.tiles), R, C)))  # (*lead, tiles, R, C)
        for n, (i, j) in enumerate(group.tiles):
            if i < table.n_q:  # a spare tile is dropped
                index[i * table.n_k + j] = base + n
        base += len(group.tiles)
    return assemble_tiles(p, table, stacked, index, lead, ops.query.dtype)[..., : p.L, : p.S]


def assemble_tiles(
    p: Problem, table: TileTable, stacked: list[Any], index: list[int | None],
    lead: tuple[int, ...], dtype: Any,
) -> Any:  # fmt: skip
    """Tiles (each of ``stacked`` (*lead, tiles, R, C)) placed in their grid cells,
    zeros in the cells ``index`` leaves None: (*lead, n_q * R, n_k * C). ``index[i *
    n_k + j]`` is the tile's position among the stacked ones, in order."""
    xp = p.xp
    R, C = table.rows, table.cols
    zero = xp.zeros((*lead, 1, R, C), dtype=dtype, device=p.device)
    tiles = xp.concat([*stacked, zero], axis=-3)  # (*lead, T + 1, R, C)
    empty = tiles.shape[-3] - 1
    at = xp.asarray([empty if n is None else n for n in index], dtype=xp.int32, device=p.device)
    grid = xp.take(tiles, at, axis=tiles.ndim - 3)  # (*lead, n_q * n_k, R, C)
    grid = xp.reshape(grid, (*lead, table.n_q, table.n_k, R, C))
    nd = len(lead)
    grid = xp.permute_dims(grid, (*range(nd), nd, nd + 2, nd + 1, nd + 3))  # (.., n_q, R, n_k, C)
    return xp.reshape(grid, (*lead, table.n_q * R, table.n_k * C))


def _weight_tile(
    p: Problem, ops: Prepared, table: TileTable, lead: tuple[int, ...],
    at: tuple[Any, ...], q: Any, k: Any, v: Any, ml: Any, kind: int | None = None,
) -> tuple[Any]:  # fmt: skip
    """One tile's weights (*lead, Bq, Bk): where allowed, exp(s - m) / l (dropout applied);
    ``at`` is (query row, key row, value row, query row, stream, kind)."""
    xp = p.xp
    shape = (*lead, table.rows, table.cols)

    def compute(masked: bool, q: Any, k: Any, v: Any, ml: Any) -> Any:
        t = LoopTile(xp, p.device, p.geometry, at[0], table.rows, at[1], table.cols)
        allowed = tile_mask(p, ops, table, t) if masked else None
        if allowed is not None and not ops.finite:
            q, k, v = neutralize(xp, q, k, v, allowed)
        _, _, scores = tile_scores(p, ops, t, q, k)
        m, total = ml[..., 0:1], ml[..., 1:2]  # (..., Bq, 1)
        live = total != 0
        w = xp.exp(scores - xp.where(live, m, 0.0)) / xp.where(live, total, 1.0)
        keep = live if allowed is None else (allowed & live)
        w = xp.where(keep, w, 0.0)
        if p.dropout_p > 0:
            keep_prob = 1.0 - p.dropout_p
            kept = p.backend.dropout_keep(p.rng, tuple(w.shape), keep_prob, like=w, stream=at[4])
            w = xp.where(kept, w / keep_prob, 0.0)
        return xp.broadcast_to(w, shape)

    full, partial = functools.partial(compute, False), functools.partial(compute, True)
    zeros = functools.partial(_zeros, xp, shape)
    kind = at[-1] if kind is None else kind
    return (by_kind(p, kind, full, partial, zeros, q, k, v, ml),)


def _zeros(xp: Any, shape: tuple[int, ...], q: Any, *rest: Any) -> Any:
    return xp.zeros(shape, dtype=q.dtype, device=device_of(q))
