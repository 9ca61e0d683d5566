"""Tiles of the blocked executor: which key columns a block reads, which pairs in them
are allowed, and the masks in the form a block kernel takes."""

from __future__ import annotations

import math
from typing import Any

from ..masks import Tile, clip_ranges
from ..masks.geometry import intersect_ranges
from ..nan_guard import allowed_pairs
from ..problem import Problem
from .operands import Prepared

__all__ = ["block_plan", "block_tile", "kernel_mask", "scatter_columns", "select_rows"]


def block_tile(p: Problem, q_lo: int, q_hi: int, live: Any = None) -> Tile | None:
    """The key columns rows [q_lo, q_hi) need under the structure (within the ``live``
    ranges where given: the key blocks the mask's data leaves alive), or None if none."""
    g = p.geometry
    ranges = [(0, g.S)] if p.structure is None else p.structure.key_ranges(g, q_lo, q_hi)
    ranges = clip_ranges(ranges, g.S)
    if live is not None:
        ranges = intersect_ranges(ranges, live)
    return Tile(p.xp, p.device, g, q_lo, q_hi, ranges) if ranges else None


def _structure_tile(p: Problem, ops: Prepared, t: Tile) -> Any:
    """The structure's tile, computed once per block shape where the structure depends
    only on key position minus query position (interior blocks of a window all match)."""
    if p.structure is None:
        return None
    if not p.structure.translation_invariant:
        return p.structure.tile(t)
    key = _shape_key(t)
    if key not in ops.tile_cache:
        ops.tile_cache[key] = p.structure.tile(t)
    return ops.tile_cache[key]


def _shape_key(t: Tile) -> tuple[Any, ...]:
    """What a translation-invariant tile depends on: rows and columns relative to q_lo."""
    return (t.q_hi - t.q_lo, tuple((lo - t.q_lo, hi - t.q_lo) for lo, hi in t.ranges))


def block_plan(
    p: Problem, ops: Prepared, q_lo: int, q_hi: int, live: Any = None
) -> tuple[Any, Any]:
    """(tile, allowed): the block's key ranges (within ``live``, :func:`block_tile`) and
    its bool mask (..., Bq, Sk) or None (every pair allowed); tile None when no key is in
    reach."""
    t = block_tile(p, q_lo, q_hi, live)
    if t is None:
        return None, None
    return t, allowed_pairs(p, t, _structure_tile(p, ops, t), ops.allowed_mask)


def kernel_mask(p: Problem, ops: Prepared, t: Tile, allowed: Any, additive_form: bool) -> Any:
    """The block's one mask for a kernel: bool ``allowed`` (or None), or with an additive
    ``attn_mask`` that mask with -inf where not allowed. ``additive_form``: the kernel
    takes 0 / -inf masks; a bool tile of a translation-invariant structure is then
    converted once per block shape (every interior block of a window reuses it)."""
    xp = p.xp
    if ops.additive is not None:
        additive = t.columns(t.rows(ops.additive))
        return additive if allowed is None else xp.where(allowed, additive, -math.inf)
    if allowed is None or not additive_form:
        return allowed
    cacheable = ops.allowed_mask is None and p.structure.translation_invariant
    key = ("additive", *_shape_key(t))
    if cacheable and key in ops.tile_cache:
        return ops.tile_cache[key]
    zero = xp.zeros((), dtype=p.compute_dtype, device=p.device)
    additive = xp.where(allowed, zero, -math.inf)  # (..., Bq, Sk)
    if cacheable:
        ops.tile_cache[key] = additive
    return additive


def scatter_columns(xp: Any, w: Any, ranges: list[tuple[int, int]], S: int, device: Any) -> Any:
    """Weights over the selected columns (..., Bq, Sk) placed into (..., Bq, S) with zeros."""
    if ranges == [(0, S)]:
        return w
    lead = tuple(w.shape[:-1])
    pieces, at, used = [], 0, 0
    for lo, hi in ranges:
        if lo > at:
            pieces.append(xp.zeros((*lead, lo - at), dtype=w.dtype, device=device))
        pieces.append(w[..., used : used + hi - lo])
        used, at = used + hi - lo, hi
    if at < S:
        pieces.append(xp.zeros((*lead, S - at), dtype=w.dtype, device=device))
    return xp.concat(pieces, axis=-1)  # (..., Bq, S)


def select_rows(xp: Any, x: Any, ranges: list[tuple[int, int]]) -> Any:
    """Rows of axis -2 in the ranges: a view for one range, a concatenation otherwise."""
    if len(ranges) == 1:
        lo, hi = ranges[0]
        return x[..., lo:hi, :]
    return xp.concat([x[..., lo:hi, :] for lo, hi in ranges], axis=-2)
