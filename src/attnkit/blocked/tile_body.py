"""What the tile loop's bodies share: the tiles the loop visits, a tile's kind, mask and
scores, the padding and the leading dims.

A tile is query rows [q, q + Bq) against key columns [k, k + Bk), q and k the loop's
integers (traced in a compiled loop); its mask comes from positions
(:class:`attnkit.masks.LoopTile`). A body computes one kind of tile (full, partial,
dead), chosen statically or at run time by the backend's ``select``.
"""

from __future__ import annotations

import copy
from typing import Any

from ..masks import FULL, PARTIAL, LoopTile
from ..nan_guard import allowed_pairs
from ..problem import Problem
from ..shapes import broadcast_shapes
from .block import tile_scores
from .loop import map_blocks, python_loop
from .operands import Prepared
from .table import TileTable, live_tiles, tile_ids

__all__ = [
    "TileList",
    "by_kind",
    "device_of",
    "pad_rows",
    "run_tiles",
    "tile_lead",
    "tile_mask",
    "tile_scores",
]


def pad_rows(xp: Any, x: Any, n: int) -> Any:
    """``x`` (..., N, X) with zero rows appended up to (..., n, X)."""
    extra = n - x.shape[-2]
    if extra <= 0:
        return x
    zeros = xp.zeros((*x.shape[:-2], extra, x.shape[-1]), dtype=x.dtype, device=device_of(x))
    return xp.concat([x, zeros], axis=-2)


def device_of(x: Any) -> Any:
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
