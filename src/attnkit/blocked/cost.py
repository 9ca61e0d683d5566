"""The executor's cost model and thresholds: block size, and when to recompute blocks.

A block of Bq rows reading Sk key columns costs Bq x Sk x heads score elements plus a
fixed per-block overhead; the block size is the power of two that minimizes the total
within a memory budget.
"""

from __future__ import annotations

import math
from typing import Any

from ..masks import clip_ranges
from ..problem import Problem
from ..shapes import prod

__all__ = [
    "BAND_ROWS",
    "BAND_WIDTH_ROWS",
    "BLOCK_OVERHEAD_ELEMENTS",
    "DEFAULT_BLOCK_BUDGET",
    "RECOMPUTE_ABOVE_ELEMENTS",
    "SKIP_COLUMNS",
    "TILE_ROWS",
    "choose_band_rows",
    "choose_block_size",
    "choose_tile_size",
    "stored_elements",
]

#: Score elements one query block may hold (x 4 bytes in float32): 2**22 is 16 MiB, which
#: keeps the working set of a block in cache-friendly pieces while making each matmul big
#: enough to run at full speed.
DEFAULT_BLOCK_BUDGET = 2**22

#: The fixed cost of one block (Python dispatch of a few dozen array calls), expressed in
#: score elements of work: about 60 us against about 3 ns per score element on CPU
#: (fitted on window and dense runs, L = 4096 to 16384, torch and NumPy). A backend may
#: declare its own (``Backend.block_overhead_elements``: JAX under jax.jit).
BLOCK_OVERHEAD_ELEMENTS = 20_000

#: Rows (and key columns) of a tile of the tile loop (:mod:`.tile_loop`) at most: each
#: tile is one trip of the loop, so smaller tiles mean more trips, larger ones more work
#: wasted on a structure's edges (``attnkit bench --tiles`` times the sizes).
TILE_ROWS = 512

#: Rows of a band tile (one per query block, :func:`attnkit.blocked.table.build_band`) at
#: most, and how many times its rows a band may be wide (wider: the grid's tiles).
BAND_ROWS = 256
BAND_WIDTH_ROWS = 4

#: Key columns per key block whose liveness a query block of the row-blocks strategy reads
#: from a mask's data (segment ids): the granularity at which other documents' keys are
#: skipped, coarse enough that the check costs little beside the blocks.
SKIP_COLUMNS = 128

#: Blocks are recomputed in the backward pass (when a backend offers it) only when the
#: scores autograd would otherwise keep, summed over blocks, exceed this many elements
#: (2**26 float32 = 256 MiB per kept tensor). Below it, storing is cheaper than
#: computing twice; windows stay below it up to long sequences.
RECOMPUTE_ABOVE_ELEMENTS = 2**26


def choose_block_size(
    p: Problem, lead: tuple[int, ...], kernels: Any = None, budget: int = DEFAULT_BLOCK_BUDGET
) -> int:
    """Query rows per block: the power of two in [16, 1024] of least estimated cost.

    The cost of all blocks is ceil(L / Bq) x (work + overhead), the overhead
    BLOCK_OVERHEAD_ELEMENTS (or the backend's own) plus, for a block kernel that loops
    over heads, its ``block_overhead_per_head`` times the heads. Candidates whose block
    exceeds the memory ``budget`` are skipped (the smallest is kept if none fits): a
    block holds Bq x Sk x heads score elements, or for a kernel that computes it in tasks
    (``Kernels.block_tasks``, read at most once here, and only for a block over the
    budget: what tasks hold is never more) what its tasks hold, and at least one head's
    Bq x Sk (the block's mask). ``kernels``: the backend's kernels the executor uses.
    ``lead``: the output's leading dims, Python ints (the Problem's ``out_lead``).
    """
    heads = max(1, prod(lead))
    block_tasks = None if kernels is None else kernels.block_tasks
    tasks = None
    per_head = 0 if kernels is None else kernels.block_overhead_per_head
    base = p.backend.block_overhead_elements or BLOCK_OVERHEAD_ELEMENTS
    overhead = base + heads * per_head
    best, best_cost = None, math.inf
    for rows in (16, 32, 64, 128, 256, 512, 1024):
        rows = min(rows, max(p.L, 1))
        width = _probe_width(p, rows)
        work = memory = rows * width * heads
        if memory > budget and block_tasks is not None:
            tasks = block_tasks() if tasks is None else tasks
            memory = max(tasks.held(rows, width, heads), rows * width)
        if memory > budget and best is not None:
            break
        cost = -(-p.L // rows) * (work + overhead)
        if cost < best_cost:
            best, best_cost = rows, cost
        if rows >= p.L:
            break
    return max(1, best or 1)


def _probe_width(p: Problem, rows: int) -> int:
    """Key columns read by a block of ``rows`` rows in the middle of the sequence."""
    if p.structure is None:
        return max(p.S, 1)
    q_lo = max(0, min(p.L - rows, p.L // 2))
    ranges = clip_ranges(p.structure.key_ranges(p.geometry, q_lo, q_lo + rows), p.S)
    return max(1, sum(hi - lo for lo, hi in ranges))


def stored_elements(p: Problem, lead: tuple[int, ...], blocks: list[tuple[int, int, bool]]) -> int:
    """Score elements over the executor's blocks ((..., Bq, Sk) each), what autograd
    would keep; the rows of a run are left out (its kernel bounds its own backward
    memory: PyTorch's keeps no scores and takes its backward pass in pieces)."""
    if len(blocks) == 1:
        return 0  # one block: recomputing it would not lower the peak
    g, total = p.geometry, 0
    for q_lo, q_hi, in_run in blocks:
        if in_run:
            continue
        ranges = [(0, g.S)] if p.structure is None else p.structure.key_ranges(g, q_lo, q_hi)
        total += (q_hi - q_lo) * sum(hi - lo for lo, hi in clip_ranges(ranges, g.S))
    return total * prod(lead)


def choose_band_rows(p: Problem, heads: int, budget: int = DEFAULT_BLOCK_BUDGET) -> int:
    """Rows of a band tile: the largest power of two up to :data:`BAND_ROWS` whose tile
    (rows x the rows' keys, at most rows + the structure's reach) over ``heads`` fits
    ``budget`` score elements, at least 16, and no longer than L needs."""
    rows = BAND_ROWS
    while rows > 16 and (rows * _probe_width(p, rows) * max(1, heads) > budget or rows // 2 >= p.L):
        rows //= 2
    return rows


def choose_tile_size(p: Problem, heads: int, budget: int = DEFAULT_BLOCK_BUDGET) -> int:
    """Rows (= key columns) of a tile of the tile loop: the largest power of two up to
    :data:`TILE_ROWS` whose (rows, rows) tile over ``heads`` fits ``budget``, at least
    16, and no larger than the longer of L and S needs (a short call is one tile). A
    tile, unlike a query block, does not widen with S."""
    rows = TILE_ROWS
    while rows > 16 and rows * rows * max(1, heads) > budget:
        rows //= 2
    while rows > 16 and rows // 2 >= max(p.L, p.S, 1):
        rows //= 2
    return rows
