"""The loop over tiles of one shape: the backend's (``Backend.map_blocks``, e.g.
``jax.lax.scan``), or a Python loop where the backend declares none.

``starts`` has one row of integers per tile: first where the tile's slice of each operand
begins on axis -2, then the body's own entries. For each tile b,
``body(starts[b], *slices)`` returns arrays (..., rows, X), which are stacked, merged (a
piece of attention packed [acc | m | l], :func:`attnkit.merge.merge_packed`) or summed
into rows of the operand they name::

    stacked_j = concat_b body(starts_b, slices_b)[j]
    merged_j  = merge_b  place(body(starts_b, slices_b)[split + j], rows of operand i)
    summed_j  = sum_b    place(body(starts_b, slices_b)[split + m + j], rows of operand i)

In a compiled loop ``starts`` may be traced.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import array_api_compat as aac

from ..merge import merge_packed, no_keys
from .accumulate import SegmentSums

__all__ = ["map_blocks", "python_loop"]

Body = Callable[..., tuple[Any, ...]]


def map_blocks(
    backend: Any,
    body: Body,
    starts: Any,
    operands: tuple[Any, ...],
    sizes: tuple[int, ...],
    sums: tuple[tuple[int, int], ...] = (),
    merges: tuple[tuple[int, int], ...] = (),
) -> tuple[Any, ...]:
    """The tiles through ``backend.map_blocks``, or :func:`python_loop` without one."""
    loop = backend.map_blocks or python_loop
    return loop(body, starts, operands, sizes, sums, merges)


def python_loop(
    body: Body,
    starts: list[tuple[int, ...]],
    operands: tuple[Any, ...],
    sizes: tuple[int, ...],
    sums: tuple[tuple[int, int], ...] = (),
    merges: tuple[tuple[int, int], ...] = (),
) -> tuple[Any, ...]:
    """``body`` tile by tile: stacked outputs concatenated on axis -2, merged ones kept
    per start row (tiles merging into one operand must start at the same rows or at
    disjoint ones), summed ones added by segments (:class:`.accumulate.SegmentSums`: no
    full-length addition per tile)."""
    xp = aac.array_namespace(*operands)
    stacked: list[tuple[Any, ...]] = []
    added = [
        SegmentSums(xp, n, {a for at in starts for a in (at[i], at[i] + sizes[i])}) for i, n in sums
    ]
    held: list[dict[int, Any]] = [{} for _ in merges]
    outs: tuple[Any, ...] = ()
    n_sum, n_merge = len(sums), len(merges)
    for at in starts:
        cut = (x[..., a : a + n, :] for x, a, n in zip(operands, at, sizes, strict=False))
        outs = body(tuple(at), *cut)
        split = len(outs) - n_sum - n_merge
        stacked.append(outs[:split])
        for pieces, (i, _), y in zip(held, merges, outs[split : split + n_merge], strict=True):
            pieces[at[i]] = y if at[i] not in pieces else merge_packed(pieces[at[i]], y)
        for acc, (i, _), y in zip(added, sums, outs[split + n_merge :], strict=True):
            acc.add(at[i], at[i] + sizes[i], y)
    split = len(outs) - n_sum - n_merge
    result = [
        xp.concat([o[j] for o in stacked], axis=-2) if len(stacked) > 1 else stacked[0][j]
        for j in range(split)
    ]
    for pieces, (i, n), y in zip(held, merges, outs[split : split + n_merge], strict=True):
        result.append(_placed(xp, pieces, sizes[i], n, y))
    for acc, (_, n), y in zip(added, sums, outs[split + n_merge :], strict=True):  # y: the last
        shape = (*y.shape[:-2], n, y.shape[-1])  # (..., n, X)
        result.append(acc.result(shape, y.dtype, aac.device(y)))
    return tuple(result)


def _placed(xp: Any, pieces: dict[int, Any], rows: int, n: int, y: Any) -> Any:
    """The merged pieces (each (..., rows, X) at its start row) in an (..., n, X) array,
    rows no piece covers attention over no key (:func:`attnkit.merge.no_keys`)."""
    parts, at = [], 0
    for lo in sorted(pieces):
        if lo < at:
            raise AssertionError(f"merged tiles overlap at row {lo}: starts must align")
        if lo > at:
            parts.append(no_keys(xp, (*y.shape[:-2], lo - at, y.shape[-1]), y.dtype, aac.device(y)))
        parts.append(pieces[lo])
        at = lo + rows
    if at < n:
        parts.append(no_keys(xp, (*y.shape[:-2], n - at, y.shape[-1]), y.dtype, aac.device(y)))
    return parts[0] if len(parts) == 1 else xp.concat(parts, axis=-2)  # (..., n, X)
