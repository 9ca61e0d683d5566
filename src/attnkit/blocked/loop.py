"""The loop over blocks of one shape: the backend's (``Backend.map_blocks``, e.g. a
``jax.lax.scan``), or this module's Python loop where the backend declares none.

For each block b, ``body`` runs on the slices ``x[..., starts[b][i] : starts[b][i] +
sizes[i], :]`` of ``operands[i]`` and returns a tuple of arrays (..., rows, X). The first
outputs come back stacked (every block's concatenated on axis -2, in order); the last
``len(sums)`` are added up: with ``sums[j] = (i, n)`` block b's output adds into rows
[starts[b][i], starts[b][i] + sizes[i]) of a zero (..., n, X) array (key gradients)::

    stacked_j = concat_b body(slices_b)[j]
    summed_j  = sum_b  scatter(body(slices_b)[split + j], rows of operand i)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import array_api_compat as aac

from .accumulate import SegmentSums

__all__ = ["map_blocks", "python_loop"]

Body = Callable[..., tuple[Any, ...]]


def map_blocks(
    backend: Any,
    body: Body,
    starts: list[tuple[int, ...]],
    operands: tuple[Any, ...],
    sizes: tuple[int, ...],
    sums: tuple[tuple[int, int], ...] = (),
) -> tuple[Any, ...]:
    """The blocks through ``backend.map_blocks``, or :func:`python_loop` without one."""
    loop = backend.map_blocks or python_loop
    return loop(body, starts, operands, sizes, sums)


def python_loop(
    body: Body,
    starts: list[tuple[int, ...]],
    operands: tuple[Any, ...],
    sizes: tuple[int, ...],
    sums: tuple[tuple[int, int], ...] = (),
) -> tuple[Any, ...]:
    """``body`` block by block: stacked outputs concatenated on axis -2, summed ones
    added by segments (:class:`.accumulate.SegmentSums`: no full-length addition per
    block)."""
    xp = aac.array_namespace(*operands)
    stacked: list[tuple[Any, ...]] = []
    added = [
        SegmentSums(xp, n, {a for at in starts for a in (at[i], at[i] + sizes[i])}) for i, n in sums
    ]
    outs: tuple[Any, ...] = ()
    for at in starts:
        cut = (x[..., a : a + n, :] for x, a, n in zip(operands, at, sizes, strict=True))
        outs = body(*cut)
        stacked.append(outs[: len(outs) - len(sums)])
        for acc, (i, _), y in zip(added, sums, outs[len(outs) - len(sums) :], strict=True):
            acc.add(at[i], at[i] + sizes[i], y)
    split = len(outs) - len(sums)
    result = [
        xp.concat([o[j] for o in stacked], axis=-2) if len(stacked) > 1 else stacked[0][j]
        for j in range(split)
    ]
    for acc, (_, n), y in zip(added, sums, outs[split:], strict=True):  # y: the last block's
        shape = (*y.shape[:-2], n, y.shape[-1])  # (..., n, X)
        result.append(acc.result(shape, y.dtype, aac.device(y)))
    return tuple(result)
