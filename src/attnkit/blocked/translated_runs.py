"""Runs of translated blocks: the interior of a sliding window in one kernel call.

Under a structure that depends only on key position minus query position (a window),
every query block away from the sequence's ends reads the same tile of keys, shifted by
``rows`` from one block to the next. Such a stretch is a *run*::

    block i of the run: queries [q_lo + i*rows, q_lo + (i+1)*rows)
                        keys    [k_lo + i*rows, k_lo + i*rows + width)
                        allowed tile (rows, width), the same for every i

A backend kernel attends a whole run in one call (``Kernels.run``; PyTorch: one SDPA over
a strided view of the keys), in small blocks of its ``run_rows``. The blocks where the
sequence's ends clip the window go through the executor as usual.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..masks import clip_ranges
from ..problem import Problem
from .operands import Prepared
from .tiles import block_plan, block_tile, kernel_mask

__all__ = ["Run", "find_run", "run_of", "run_operands"]


@dataclass(frozen=True)
class Run:
    """Query rows [q_lo, q_hi) in blocks of ``rows``; block i reads key rows
    [k_lo + i*step, k_lo + i*step + width), ``step`` = ``rows`` (a window's interior:
    :func:`find_run`) unless given (0: every block reads the same keys, unstructured
    attention: :func:`uniform_run`). ``q_hi - q_lo`` is a multiple of ``rows``."""

    q_lo: int
    q_hi: int
    k_lo: int
    rows: int
    width: int
    step: int | None = None

    @property
    def stride(self) -> int:
        """Key rows between the starts of consecutive blocks."""
        return self.rows if self.step is None else self.step

    @property
    def blocks(self) -> int:
        return (self.q_hi - self.q_lo) // self.rows

    @property
    def k_hi(self) -> int:
        """One past the last key row the run reads."""
        return self.k_lo + (self.blocks - 1) * self.stride + self.width


def find_run(p: Any, rows: int, min_blocks: int = 2) -> Run | None:
    """The longest run of at least ``min_blocks`` blocks of ``rows`` rows (blocks start at
    multiples of ``rows``), or None: always None without a translation-invariant structure
    and under causal attention (block i reads keys [0, (i+1)*rows): no two alike).

    Under a translation-invariant structure a block's key columns, relative to its first
    row, are the same for every block that the sequence's ends do not clip, and clipping
    bites on a prefix and a suffix of the blocks: the run is the blocks in between. When
    the two middle blocks match, it is found by walking in from both ends to the first
    block that matches them, in as many steps as there are clipped blocks; otherwise
    (a window as long as the sequence, offsets that put the unclipped blocks off-center,
    causal attention) by comparing every block with the next.
    """
    s = p.structure
    n = p.L // rows if rows >= 1 else 0
    if s is None or not s.translation_invariant or n < max(min_blocks, 2):
        return None
    mid = n // 2
    target = _relative_columns(p, mid * rows, rows)
    if target is not None and _relative_columns(p, (mid - 1) * rows, rows) == target:
        same = (b for b in range(mid - 1) if _relative_columns(p, b * rows, rows) == target)
        first = next(same, mid - 1)
        same = (b for b in range(n - 1, mid, -1) if _relative_columns(p, b * rows, rows) == target)
        count = next(same, mid) - first + 1
    else:
        first, count, target = _longest_stretch(p, n, rows)
    if count < min_blocks or target is None:
        return None
    return Run(
        first * rows, (first + count) * rows, first * rows + target[0], rows, target[1] - target[0]
    )


def _longest_stretch(p: Any, n: int, rows: int) -> tuple[int, int, tuple[int, int] | None]:
    """(first block, number of blocks, relative columns) of the longest stretch of
    consecutive blocks among the first ``n`` whose relative key columns are one range and
    the same, by checking every block."""
    best: tuple[int, int, tuple[int, int] | None] = (0, 0, None)
    start, count, last = 0, 0, None
    for b in range(n):
        rel = _relative_columns(p, b * rows, rows)
        if rel is not None and rel == last:
            count += 1
        else:
            start, count = b, int(rel is not None)
        last = rel
        if count > best[1]:
            best = (start, count, rel)
    return best


def _relative_columns(p: Any, q_lo: int, rows: int) -> tuple[int, int] | None:
    """The key columns rows [q_lo, q_lo + rows) read, as (lo, hi) relative to q_lo, or
    None unless they form one range."""
    ranges = clip_ranges(p.structure.key_ranges(p.geometry, q_lo, q_lo + rows), p.geometry.S)
    return (ranges[0][0] - q_lo, ranges[0][1] - q_lo) if len(ranges) == 1 else None


def run_of(p: Problem, ops: Prepared, kernels: Any, need_weights: bool) -> Run | None:
    """The run of translated blocks a backend kernel can attend in one call, or None:
    only for a kernel with ``run``, without weights, without a dense ``attn_mask`` (its
    tiles differ from block to block), on operands checked finite (the run's tile masks
    pairs, and its kernel adds -inf)."""
    if kernels is None or kernels.run is None or need_weights:
        return None
    if ops.allowed_mask is not None or ops.additive is not None or not ops.finite:
        return None
    return find_run(p, kernels.run_rows)


def run_operands(p: Problem, ops: Prepared, kernels: Any, run: Run) -> tuple[Any, ...]:
    """(q (..., blocks * rows, E), k, v (..., (blocks - 1) * rows + width, E|Ev), the
    blocks' one mask (rows, width) in the kernel's form, or None) of ``run``."""
    t = block_tile(p, run.q_lo, run.q_lo + run.rows)  # the first block: (rows, width)
    _, allowed = block_plan(p, ops, run.q_lo, run.q_lo + run.rows)  # (..., rows, width)
    mask = None if t is None else kernel_mask(p, ops, t, allowed, kernels.block_wants_additive)
    q = ops.query[..., run.q_lo : run.q_hi, :]
    k = ops.key[..., run.k_lo : run.k_hi, :]
    v = ops.value[..., run.k_lo : run.k_hi, :]
    return q, k, v, mask
