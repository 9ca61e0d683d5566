"""Attention as one loop over the tile table: every call form, one body per kind of tile.

The table (:mod:`.table`) lists the (query block, key block) tiles a call attends, full
ones apart. Each tile computes a piece of attention over its key block, FlashAttention's
online softmax (packed [acc | m | l], :func:`attnkit.merge.merge_packed`)::

    s   = score_mod((q_i * scale) @ k_j^T) + attn_mask tile     # (..., Bq, Bk)
    s   = where(allowed, s, -inf)        # partial tiles: the mask from positions and data
    m   = rowmax(s),  e = exp(s - m),  l = rowsum(e)
    acc = dropout(e) @ v_j                                       # (..., Bq, Ev)

and the pieces merge into their query rows; at the end ``out = acc / l`` and
``lse = m + log l`` (0 and -inf on rows with no key). The partial tiles' mask is computed
in the body from the tile's position (a traced integer in a compiled loop): the
structure's tile (:class:`attnkit.masks.LoopTile`), the ``attn_mask`` array's tile, and
the padded keys past S; ``score_mod`` sees the tile's absolute positions; dropout draws
from the tile's place in the grid (``i * n_k + j``, its stream), so the pattern does not
depend on the loop's order and the backward pass redraws it. Where the mask's data says
at run time which tiles hold a pair (:func:`.table.live_tiles`), dead tiles are dropped
before the loop when the values are concrete, and skipped by the backend's ``select``
(``jax.lax.cond``) inside a compiled loop.

The loop is the backend's (``Backend.map_blocks``): ``jax.lax.scan`` on JAX, so that a
jitted program holds the two bodies (full and partial) once, whatever L. Operands are
padded with zeros to whole tiles (padded keys masked, padded rows dropped). Weights, on
request, come from a second loop over the same table with the final m and l.
"""

from __future__ import annotations

import copy
import functools
import math
from typing import Any

from .._problem import Problem
from ..masked_operands import allowed_pairs, neutralize, weighted_values
from ..masks import FULL, PARTIAL, LoopTile
from ..merge import finish_packed, merge_packed, no_keys
from ..score_mods import apply_score_mod
from ..shapes import broadcast_shapes
from ..softmax import softmax_numerator
from .loop import map_blocks, python_loop
from .operands import Prepared
from .table import TileTable, live_tiles, tile_ids

__all__ = [
    "TileList",
    "assemble_tiles",
    "by_kind",
    "pad_rows",
    "run_tiles",
    "tile_attention",
    "tile_lead",
    "tile_mask",
    "tile_scores",
]


def pad_rows(xp: Any, x: Any, n: int) -> Any:
    """``x`` (..., N, X) with zero rows appended up to (..., n, X)."""
    extra = n - x.shape[-2]
    if extra <= 0:
        return x
    zeros = xp.zeros((*x.shape[:-2], extra, x.shape[-1]), dtype=x.dtype, device=_device(x))
    return xp.concat([x, zeros], axis=-2)


def _device(x: Any) -> Any:
    from array_api_compat import device

    return device(x)


def tile_lead(p: Problem, ops: Prepared) -> tuple[int, ...]:
    """The leading dims every tile's output is broadcast to: the operands' and the
    structure's (a mask carrying (B, 1), in the GQA layout)."""
    lead = ops.lead
    s = p.structure
    if s is not None and s.lead:
        mask_lead = tuple(s.lead)
        if p.gqa_groups > 1 and mask_lead:
            heads = mask_lead[-1]
            g = p.gqa_groups
            mask_lead = (*mask_lead[:-1], *((1, 1) if heads == 1 else (heads // g, g)))
        both = broadcast_shapes(lead, mask_lead)
        assert both is not None, "validated structure broadcasts"
        lead = both
    return lead


class TileList:
    """The tiles the loop visits, in row-major order, as the loop's ``starts``: per tile
    the query row, the key row (twice: key and value), the query row again for each
    further operand cut by rows, then its stream (i * n_k + j) and its kind (``FULL``,
    ``PARTIAL``, or 0 for a tile the mask's data leaves dead). Where the data is read
    at run time and the values are concrete, dead tiles are dropped here; traced, the
    kinds are an array the loop reads tile by tile (the body's ``select`` skips them)."""

    def __init__(self, p: Problem, ops: Prepared, table: TileTable) -> None:
        tiles = sorted([*((t, FULL) for t in table.full), *((t, PARTIAL) for t in table.partial)])
        self.rows, self.cols, self.key_start = table.rows, table.cols, table.key_start
        self.n_q = table.n_q
        # the backend's compiled loop, unless the whole call is one tile (no loop to gain)
        self.compiled = p.backend.map_blocks is not None and table.tiles > 1
        self.tiles = [t for t, _ in tiles]
        self.kinds: list[int] = [kind for _, kind in tiles]
        self.ids = tile_ids(table, self.tiles)
        self.traced_kinds: Any = None
        live = live_tiles(p, ops, table.rows, table.cols) if table.dynamic else None
        if live is None or not self.tiles:
            return
        flat = p.xp.reshape(live, (-1,))  # (n_q * n_k,)
        concrete = _concrete_bools(flat, self.ids)
        if concrete is not None:  # values readable: dead tiles never enter the loop
            kept = [n for n, ok in enumerate(concrete) if ok]
            self.tiles = [self.tiles[n] for n in kept]
            self.kinds = [self.kinds[n] for n in kept]
            self.ids = [self.ids[n] for n in kept]
        elif p.backend.select is not None:  # traced: each tile's kind read in the loop
            xp = p.xp
            index = xp.asarray(self.ids, dtype=xp.int32, device=p.device)
            alive = xp.astype(xp.take(flat, index, axis=0), xp.int32)
            self.traced_kinds = alive * xp.asarray(self.kinds, dtype=xp.int32, device=p.device)

    def groups(self) -> list[tuple[TileList, int | None]]:
        """The loops to run, each with the kind its body computes (None: each tile's own,
        read in the loop, for kinds read at run time). With the kinds known statically,
        one loop per kind (full tiles first), no branch in the body (a compiled loop
        runs a branch per trip about 10% slower). A compiled loop has both, so that a
        program holds the same bodies whatever the table (its size does not depend on
        L): a kind with no tile gets one spare tile on rows past the padded query rows
        (:attr:`spare`), computed and dropped."""
        if self.traced_kinds is not None or not self.tiles:
            return [(self, None)] if self.tiles else []
        out = []
        for kind in (FULL, PARTIAL):
            keep = [n for n, k in enumerate(self.kinds) if k == kind]
            if not keep and not self.compiled:
                continue
            sub = copy.copy(self)
            sub.tiles = [self.tiles[n] for n in keep] or [(self.n_q, 0)]  # spare: past Lp
            sub.kinds = [kind] * len(sub.tiles)
            sub.ids = [self.ids[n] for n in keep] or [-1]
            out.append((sub, kind))
        return out

    @property
    def spare(self) -> bool:
        """Whether a loop runs a spare tile (:meth:`groups`): the query rows are padded by
        one more block for it."""
        if not self.compiled or self.traced_kinds is not None or not self.tiles:
            return False
        return len(set(self.kinds)) == 1

    @property
    def padded_rows(self) -> int:
        """The query rows the loop's slices reach."""
        return (self.n_q + int(self.spare)) * self.rows

    def starts(self, p: Problem, q_operands: int) -> Any:
        """The loop's ``starts`` with ``q_operands`` further operands cut by query rows."""
        rows = [
            (i * self.rows, k, k, *([i * self.rows] * q_operands), t, kind)
            for (i, j), t, kind in zip(self.tiles, self.ids, self.kinds, strict=True)
            for k in [self.key_start(j)]
        ]
        if self.traced_kinds is None:
            return rows
        if not self.compiled:  # the Python loop slices by ints; each kind stays traced
            return [(*r[:-1], self.traced_kinds[n]) for n, r in enumerate(rows)]
        xp = p.xp
        static = xp.asarray([r[:-1] for r in rows], dtype=xp.int32, device=p.device)
        return xp.concat([static, self.traced_kinds[:, None]], axis=1)  # (tiles, entries)


def _concrete_bools(flat: Any, ids: list[int]) -> list[bool] | None:
    """The flags of ``ids`` in the bool ``flat`` as Python bools, or None where the values
    cannot be read (traced)."""
    try:
        values = flat.tolist() if hasattr(flat, "tolist") else None
        if values is None:
            values = [bool(flat[n]) for n in range(flat.shape[0])]
        return [bool(values[n]) for n in ids]
    except (TypeError, RuntimeError, ValueError):  # traced (JAX's errors are TypeErrors)
        return None


def by_kind(p: Problem, kind: Any, full: Any, partial: Any, empty: Any, *operands: Any) -> Any:
    """``full``, ``partial`` or ``empty`` of ``operands`` by the tile's kind: a Python int
    in the Python loop; traced in a compiled loop, chosen by the backend's ``select``
    (``jax.lax.cond``: one branch runs, and the program holds each once whatever the
    table). Without ``select``, ``partial`` (its mask then holds every pair of a full
    tile and none of a dead one: the same result)."""
    if isinstance(kind, int):
        return (full if kind == FULL else partial if kind == PARTIAL else empty)(*operands)
    select = p.backend.select
    if select is None:
        return partial(*operands)

    def not_full(*operands: Any) -> Any:
        return select(kind == PARTIAL, partial, empty, *operands)

    return select(kind == FULL, full, not_full, *operands)


def tile_mask(p: Problem, ops: Prepared, table: TileTable, t: LoopTile) -> Any:
    """The partial tile's bool mask (..., Bq, Bk) in the GQA layout, or None (all
    allowed): the structure's tile, the ``attn_mask`` tile, and the padding: keys past
    S, and rows past L (they attend nothing, so that a key only they would read counts
    as unused and its NaN is zeroed before any product)."""
    structure = None if p.structure is None else p.structure.tile(t)
    allowed = allowed_pairs(p, t, structure, ops.allowed_mask)
    if table.padded_keys > p.S:
        inside = t.k_index < p.S  # (1, Bk): padded keys
        allowed = inside if allowed is None else allowed & inside
    if p.L % table.rows and allowed is not None:
        inside = t.q_index < p.L  # (Bq, 1): padded rows
        allowed = allowed & inside
    return allowed


def tile_scores(p: Problem, ops: Prepared, t: LoopTile, q: Any, k: Any) -> tuple[Any, Any, Any]:
    """(raw, modified, scores) of a tile (..., Bq, Bk): raw = (q * scale) @ k^T,
    modified = score_mod(raw), scores = modified + the additive mask's tile."""
    xp = p.xp
    raw = (q * p.scale) @ xp.matrix_transpose(k)  # (..., Bq, Bk)
    modified = raw
    if p.score_mod is not None:
        modified = apply_score_mod(p.score_mod, xp, raw, t, p.num_heads, p.gqa_groups)
    scores = modified
    if ops.additive is not None:
        scores = scores + t.columns(t.rows(ops.additive))
    return raw, modified, scores


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
    return no_keys(xp, shape, q.dtype, _device(q)) + xp.zeros(shape, dtype=q.dtype)


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
        weights = _weights(p, ops, table, tiles, lead, q, k, v, m, total)
    return out, weights, lse, (m, total)


def run_tiles(
    p: Problem, tiles: TileList, body: Any, starts: Any, operands: tuple[Any, ...],
    sizes: tuple[int, ...], sums: tuple[tuple[int, int], ...] = (),
    merges: tuple[tuple[int, int], ...] = (),
) -> tuple[Any, ...]:  # fmt: skip
    """The tiles through the backend's compiled loop, or the Python loop (no compiled
    loop, or a call of one tile)."""
    if not tiles.compiled:
        return python_loop(body, starts, operands, sizes, sums, merges)
    return map_blocks(p.backend, body, starts, operands, sizes, sums, merges)


def _weights(
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
    return xp.zeros(shape, dtype=q.dtype, device=_device(q))
