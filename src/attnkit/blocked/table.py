"""The tile table of a call: which (query block, key block) tiles it attends, and how.

The call's L x S pairs are cut into tiles of ``rows`` query rows by ``cols`` key
columns (blocks counted from position 0 of the call). Each tile is one of::

    empty     no pair allowed                    never computed
    full      every pair allowed                 computed without a mask
    partial   some pairs allowed                 computed with the tile's mask

as FlexAttention's ``BlockMask`` holds them (per query block, the key blocks it needs,
full ones apart). Built statically, once per plan, from the structure's
:meth:`attnkit.masks.Mask.tile_kind` (causal in both alignments, windows, offsets,
``documents``, ``block_sparse``, ``bigbird``, ``global_tokens``, static ``key_padding``
and their ``&`` / ``|``). Masks held as data (``segments`` ids, ``key_padding`` lengths as
an array, ``dense``) and an ``attn_mask`` array make every candidate tile partial, and
:func:`live_tiles` reads at run time which of them hold an allowed pair
(:meth:`attnkit.masks.Mask.tile_live`): a fixed table whose entries carry a live flag,
so that a traced mask skips tiles inside one compiled program too. Unstructured
attention is the table of all full tiles.

    causal, L = S = 4 blocks        documents([2 blocks, 2 blocks]) & causal
    P . . .                         P . . .
    F P . .                         F P . .
    F F P .                         . . P .
    F F F P                         . . F P
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._problem import Problem
from ..masks import EMPTY, FULL, clip_ranges, tile_any

__all__ = ["TileTable", "build_table", "live_tiles", "tile_ids"]


@dataclass(frozen=True)
class TileTable:
    """The tiles a call attends: ``full`` and ``partial`` list (i, j), query block i
    (rows [i * rows, (i + 1) * rows)) against key block j (columns [j * cols, (j + 1) *
    cols)), in row-major order. ``dynamic``: the partial tiles' liveness is read from
    the mask's data at run time (:func:`live_tiles`)."""

    rows: int
    cols: int
    L: int
    S: int
    full: tuple[tuple[int, int], ...]
    partial: tuple[tuple[int, int], ...]
    dynamic: bool = False

    @property
    def n_q(self) -> int:
        return -(-self.L // self.rows)

    @property
    def n_k(self) -> int:
        return -(-self.S // self.cols)

    @property
    def tiles(self) -> int:
        return len(self.full) + len(self.partial)

    @property
    def skipped(self) -> int:
        """Tiles of the L x S grid never computed (statically empty)."""
        return self.n_q * self.n_k - self.tiles

    def row_columns(self, i: int) -> list[tuple[int, int]]:
        """The key columns [lo, hi) query block i reads: its tiles' columns, merged."""
        cols = sorted(j for a, j in (*self.full, *self.partial) if a == i)
        out: list[tuple[int, int]] = []
        for j in cols:
            lo, hi = j * self.cols, min(self.S, (j + 1) * self.cols)
            if out and out[-1][1] == lo:
                out[-1] = (out[-1][0], hi)
            else:
                out.append((lo, hi))
        return out


def build_table(p: Problem, rows: int, cols: int, padded: bool = False) -> TileTable:
    """The table of ``p`` in tiles of ``rows`` x ``cols``. ``padded``: the loop pads the
    keys to whole tiles (a compiled loop's uniform slices), so a last key block shorter
    than ``cols`` is partial (its padded columns are masked)."""
    s, g = p.structure, p.geometry
    n_q, n_k = -(-p.L // rows), -(-p.S // cols)
    data = p.mask is not None or (s is not None and s.holds_data)
    ragged = padded and p.S % cols != 0
    full: list[tuple[int, int]] = []
    partial: list[tuple[int, int]] = []
    for i in range(n_q):
        q_lo, q_hi = i * rows, min(p.L, (i + 1) * rows)
        if s is None:
            js = range(n_k)
        else:
            ranges = clip_ranges(s.key_ranges(g, q_lo, q_hi), p.S)
            js = sorted({j for lo, hi in ranges for j in range(lo // cols, -(-hi // cols))})
        for j in js:
            k_lo, k_hi = j * cols, min(p.S, (j + 1) * cols)
            kind = FULL if s is None else s.tile_kind(g, q_lo, q_hi, k_lo, k_hi)
            if kind == EMPTY:
                continue
            if kind == FULL and not data and not (ragged and j == n_k - 1):
                full.append((i, j))
            else:
                partial.append((i, j))
    return TileTable(rows, cols, p.L, p.S, tuple(full), tuple(partial), data)


def live_tiles(p: Problem, ops: Any, rows: int, cols: int, user_mask: bool = True) -> Any:
    """Bool (n_q, n_k) of the tiles of ``rows`` x ``cols`` whose mask data allows some
    pair (the structure's :meth:`~attnkit.masks.Mask.tile_live`, and with ``user_mask``
    the ``attn_mask`` array's, ANDed), in the call's namespace (traced under
    ``jax.jit``), or None where nothing is read at run time."""
    xp = p.xp
    live = None
    if p.structure is not None:
        live = p.structure.tile_live(xp, p.device, p.geometry, rows, cols)
    if user_mask and ops.allowed_mask is not None:
        user = tile_any(xp, ops.allowed_mask, rows, cols)
        live = user if live is None else live & user
    if live is None:
        return None
    return xp.broadcast_to(live, (-(-p.L // rows), -(-p.S // cols)))


def tile_ids(table: TileTable, tiles: tuple[tuple[int, int], ...]) -> list[int]:
    """Each tile's position in the grid, i * n_k + j: its dropout stream and its place in
    the flattened liveness."""
    return [i * table.n_k + j for i, j in tiles]
