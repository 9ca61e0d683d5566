"""Causal attention as a loop over (query block, key block) pairs.

Under causal attention no two query blocks read the same number of keys (block i reads
keys [0, (i+1) * rows)), so the executor's loop over uniform blocks
(:func:`.translated_runs.uniform_run`) finds nothing to take, and a compiler unrolls
one block per ``rows`` query rows. Cut the keys into blocks of ``rows`` too: every
(query block, key block) pair then has the same (rows, rows) shape, and its tile of
allowed pairs is one of a few kinds::

    full     every pair allowed (below the diagonal)        one loop, no mask
    partial  the diagonal's triangle (a window's edges)     one loop per tile, its mask
    empty    nothing allowed (above the diagonal)           skipped

Each loop (``Backend.map_blocks``) runs :func:`.block.attend_tile` on its pairs and
merges every pair's (out, lse) into its query rows by log-sum-exp
(:func:`attnkit.merge.merge_packed`); the groups' results merge the same way. A compiled
program holds one body per group (two for causal attention), whatever L, and the work
is the attended tiles: about half of full attention's. The backward pass loops over the
same pairs and adds every pair's dq, dk, dv into its rows (:mod:`.backward`).

Taken for banded structures (:attr:`attnkit.masks.Mask.banded`: causal, windows, with
either alignment and any offsets) that are translation-invariant, where the backend
declares a loop of its own (``Backend.map_blocks``: a compiled loop; the Python loop of
the other backends is better served by the executor's one block per query block), and
on the same calls as the uniform loop (no weights, dropout, score mods or ``attn_mask``
array). Tiles are square, of :func:`.cost.choose_pair_size` rows (or ``block_size``);
the query rows beyond the last whole tile go through the executor's blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._problem import Problem
from ..masked_operands import allowed_pairs
from ..masks import Tile, clip_ranges
from ..merge import merge_packed
from ..shapes import broadcast_shapes, prod
from . import cost
from .block import attend_tile, block_values
from .loop import map_blocks
from .operands import Prepared

__all__ = ["PairGroup", "PairPlan", "attend_pairs", "pair_plan", "pair_tile"]

#: At most this many loops (tile kinds) per call; a structure needing more stays on the
#: executor's blocks.
MAX_GROUPS = 6


@dataclass(frozen=True)
class PairGroup:
    """Pairs of one tile: query rows [q, q + rows) against keys [k, k + width) for each
    (q, k) in ``starts``; ``full``: every pair of the tile allowed (no mask)."""

    width: int
    full: bool
    starts: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class PairPlan:
    """Query rows [0, q_hi) (whole blocks of ``rows``) attended by ``groups``' loops."""

    q_hi: int
    rows: int
    groups: tuple[PairGroup, ...]

    q_lo = 0

    @property
    def pairs(self) -> int:
        return sum(len(g.starts) for g in self.groups)


def pair_plan(p: Problem, kernels: Any, rows: int) -> PairPlan | None:
    """The (query block, key block) pairs that cover the call's whole query blocks, in at
    most :data:`MAX_GROUPS` tile kinds, or None where the pair loop is not taken (module
    docstring, and where the executor's blocks of ``rows`` rows are two or fewer: nothing
    to unroll). The tiles have the caller's ``block_size`` rows, else
    :func:`.cost.choose_pair_size`'s. Reads the call only (:func:`attnkit.explain` asks
    it too)."""
    if kernels is not None and (kernels.block is not None or kernels.run is not None):
        return None
    if p.need_weights or p.dropout_p > 0 or p.score_mod is not None or p.mask is not None:
        return None
    s, b = p.structure, p.backend
    if s is None or not (s.banded and s.translation_invariant) or b.map_blocks is None:
        return None
    if b.recompute_block is not None and not b.map_blocks_recomputes:
        return None  # autodiff would store every pair's scores
    if p.block_size is None:
        if -(-p.L // max(rows, 1)) <= 2:
            return None  # the executor's blocks are few: a loop gains nothing
        rows = cost.choose_pair_size(p, int(prod(p.out_lead)))
    n = p.L // rows if rows >= 1 else 0
    if n < 2 or p.S < 1:
        return None
    key_blocks = [(lo, min(lo + rows, p.S)) for lo in range(0, p.S, rows)]
    groups: dict[tuple[Any, ...], list[tuple[int, int]]] = {}
    for i in range(n):
        q_lo = i * rows
        # the block's keys are the union of its rows' (rows of a band whose window lies
        # past the keys attend nothing, so the first and last rows alone can miss some)
        span = clip_ranges(p.structure.key_ranges(p.geometry, q_lo, q_lo + rows), p.S)
        if not span:
            continue
        lo, hi = span[0][0], span[-1][1]
        # nondecreasing ends: where both end rows attend, the tightest bounds are theirs
        first = _row_range(p, q_lo)
        last = _row_range(p, q_lo + rows - 1)
        for k_lo, k_hi in key_blocks:
            if k_hi <= lo or k_lo >= hi:
                continue  # no row reaches these keys
            full = first is not None and last is not None
            full = full and last[0] <= k_lo and k_hi <= first[1]
            # a translation-invariant tile depends on its keys' place relative to its rows
            kind = ("full", k_hi - k_lo) if full else ("partial", k_hi - k_lo, k_lo - q_lo)
            groups.setdefault(kind, []).append((q_lo, k_lo))
    if not groups or len(groups) > MAX_GROUPS:
        return None
    plan = tuple(
        PairGroup(kind[1], kind[0] == "full", tuple(starts)) for kind, starts in groups.items()
    )
    return PairPlan(n * rows, rows, plan)


def _row_range(p: Problem, q: int) -> tuple[int, int] | None:
    """The key columns [lo, hi) row ``q`` attends, or None if none."""
    ranges = clip_ranges(p.structure.key_ranges(p.geometry, q, q + 1), p.S)
    return ranges[0] if ranges else None


def pair_tile(p: Problem, ops: Prepared, plan: PairPlan, group: PairGroup) -> Any:
    """The group's bool tile (..., rows, width) in the GQA layout, or None (all allowed):
    its first pair's, the same for every pair of a translation-invariant structure."""
    if group.full:
        return None
    q_lo, k_lo = group.starts[0]
    t = Tile(p.xp, p.device, p.geometry, q_lo, q_lo + plan.rows, [(k_lo, k_lo + group.width)])
    return allowed_pairs(p, t, p.structure.tile(t), None)


def attend_pairs(p: Problem, ops: Prepared, plan: PairPlan) -> tuple[Any, Any]:
    """(out (..., q_hi, Ev), lse (..., q_hi)) of the plan's query rows: every group's
    pairs through ``Backend.map_blocks``, merged into their rows, then the groups merged."""
    xp = p.xp
    values = block_values(p, ops, False)  # (..., S, Ev[+1])
    packed = None
    for group in plan.groups:
        allowed = pair_tile(p, ops, plan, group)  # (..., rows, width) or None

        def body(q: Any, k: Any, v: Any, allowed: Any = allowed) -> tuple[Any]:
            out, _, lse = attend_tile(p, ops, None, None, allowed, q, k, v, 0, False)
            # a value with leading dims of its own widens out, not lse: lse to out's dims
            lse = xp.broadcast_to(lse[..., None], (*out.shape[:-1], 1))
            return (xp.concat([out, lse], axis=-1),)  # (..., rows, Ev + 1)

        starts = [(q, k, k) for q, k in group.starts]  # query, key and value rows
        sizes = (plan.rows, group.width, group.width)
        (piece,) = map_blocks(
            p.backend, body, starts, (ops.query, ops.key, values), sizes, merges=((0, plan.q_hi),)
        )  # (..., q_hi, Ev + 1)
        if packed is not None and tuple(packed.shape) != tuple(piece.shape):
            # a tile's mask may bring leading dims the whole tiles' outputs lack
            both = broadcast_shapes(tuple(packed.shape), tuple(piece.shape))
            packed, piece = xp.broadcast_to(packed, both), xp.broadcast_to(piece, both)
        packed = piece if packed is None else merge_packed(packed, piece)
    return packed[..., :-1], packed[..., -1]
