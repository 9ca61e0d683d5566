"""The blocked executor: exact attention over all query rows, by the call's plan.

**Tiles** (:mod:`.tile_loop`): one loop over the tile table that the backend compiles.
**Row blocks**: ``rows`` query rows at a time (default: :mod:`.cost`) in a Python loop,
so the scores in memory are (..., Bq, Sk), never (..., L, S) unless the weights are asked
for. Each block reads only the key columns its structure allows (:mod:`.tiles`) and the
key blocks the plan's table finds alive, through :mod:`.block`'s formula; a window's
interior goes to the backend's kernel in runs (:mod:`.translated_runs`).
"""

from __future__ import annotations

import functools
from typing import Any

from ..problem import Problem
from ..shapes import broadcast_shapes
from . import cost
from .block import attend_block
from .operands import Prepared, empty_result, prepare_operands
from .table import live_tiles
from .tile_loop import tile_attention
from .tiles import block_plan
from .translated_runs import Run, run_of, run_operands

__all__ = ["blocked_attention", "forward", "skipped_columns"]


def blocked_attention(p: Problem, plan: Any) -> tuple[Any, Any, Any]:
    """Attention over all rows: (out (..., L, Ev), weights (..., L, S) or None, lse (..., L))
    in the compute dtype and the GQA layout (:func:`attnkit.problem.gqa_layout`), by
    ``plan`` (:func:`attnkit.plan.plan_of`)."""
    out, weights, lse, _ = forward(p, plan)
    return out, weights, lse


def forward(p: Problem, plan: Any) -> tuple[Any, Any, Any, tuple[Any, ...]]:
    """(out, weights or None, lse or None, stats): as :func:`blocked_attention`, with the
    row statistics the backward pass reads: (m, l) from the tiles, (lse,) from row
    blocks (lse is given wherever the executor's arithmetic computes it)."""
    if plan.strategy == "tiles":
        ops = prepare_operands(p, None)
        if p.L == 0:
            out, weights, lse = empty_result(p, ops.lead, 0, p.need_weights)
            return out, weights, lse, (lse, lse)
        out, weights, lse, stats = tile_attention(p, ops, plan.table, p.need_weights)
        return out, weights, lse, stats
    out, weights, lse = _row_blocks(p, plan)
    return out, weights, lse, (lse,)


def _row_blocks(p: Problem, plan: Any) -> tuple[Any, Any, Any]:
    """The row-blocks strategy: query blocks of ``plan.rows`` in a Python loop. Without
    weights or dropout, a backend with ``recompute_block`` (``torch.utils.checkpoint``)
    runs each block so that autodiff recomputes it in the backward pass rather than
    storing its scores, where what it would store is large."""
    xp, need_weights, kernels = p.xp, p.need_weights, plan.kernels
    plain = not need_weights and p.dropout_p == 0
    ops = prepare_operands(p, kernels, shortcuts=plain)
    if p.L == 0:
        return empty_result(p, ops.lead, 0, need_weights)
    rows = plan.rows
    run = None if kernels is None or kernels.run is None else run_of(p, ops, kernels, need_weights)
    run_out = None if run is None else _attend_run(p, ops, kernels, run)  # (out, lse) | None
    blocks = _segment_blocks(p, rows, None if run_out is None else run)
    columns = None if run_out is not None else skipped_columns(p, ops, plan)
    recompute = p.backend.recompute_block if plain else None
    if recompute is not None:  # what autograd would keep, if small (e.g. a window): kept
        if cost.stored_elements(p, ops.lead, blocks) < cost.RECOMPUTE_ABOVE_ELEMENTS:
            recompute = None
    outs, weights, lses = [], [], []
    for stream, (q_lo, q_hi, in_run) in enumerate(blocks):
        live = None if columns is None else columns[q_lo // rows]
        if in_run:  # the run's rows, attended above in one kernel call
            (out, lse), w = run_out, None
        elif recompute is None:
            block = None if live is None else block_plan(p, ops, q_lo, q_hi, live)
            out, w, lse = attend_block(p, ops, kernels, q_lo, q_hi, stream, need_weights, block)
        else:
            # masks and tiles are built outside the recomputed function: they hold no
            # gradient, and tiles are cached across blocks
            block = block_plan(p, ops, q_lo, q_hi, live)
            out, w, lse = recompute(
                functools.partial(attend_block, p, ops, kernels, q_lo, q_hi, stream, False, block),
                ops.query,
                ops.key,
                ops.value,
            )
        outs.append(out)
        lses.append(lse)
        weights.append(w)
    if len(outs) == 1:
        return outs[0], weights[0], lses[0]
    # Blocks may differ in leading dims (an empty block's zeros span every operand's,
    # a block whose tile is all allowed lacks the mask's): broadcast them to one.
    out = xp.concat(_common_lead(xp, outs, 2), axis=-2)  # (..., L, Ev)
    lse = None if any(x is None for x in lses) else xp.concat(_common_lead(xp, lses, 1), axis=-1)
    if need_weights:
        weights = xp.concat(_common_lead(xp, weights, 2), axis=-2)  # (..., L, S)
    return out, (weights if need_weights else None), lse


def skipped_columns(p: Problem, ops: Prepared, plan: Any) -> list[Any] | None:
    """Per query block of ``plan.rows``, the key columns [lo, hi) of the key blocks of
    ``plan.grid``'s columns that the mask's data leaves alive, where the values are
    concrete (segment ids given as arrays: other documents' keys are skipped); None
    otherwise (every block reads what its structure allows)."""
    if plan.grid is None:
        return None
    rows, cols = plan.grid
    live = live_tiles(p, ops, rows, cols, user_mask=False)
    if live is None:
        return None
    try:
        flags = live.tolist() if hasattr(live, "tolist") else None
        if flags is None:
            flags = [[bool(live[i, j]) for j in range(live.shape[1])] for i in range(live.shape[0])]
    except (TypeError, RuntimeError, ValueError):  # traced: every candidate tile is read
        return None
    out = []
    for row in flags:
        ranges: list[tuple[int, int]] = []
        for j, alive in enumerate(row):
            if not alive:
                continue
            lo, hi = j * cols, min(p.S, (j + 1) * cols)
            if ranges and ranges[-1][1] == lo:
                ranges[-1] = (ranges[-1][0], hi)
            else:
                ranges.append((lo, hi))
        out.append(ranges)
    return out


def _common_lead(xp: Any, pieces: list[Any], tail: int) -> list[Any]:
    """``pieces`` broadcast to their common leading dims (all axes but the last ``tail``)."""
    lead = broadcast_shapes(*(tuple(x.shape[:-tail]) for x in pieces))
    assert lead is not None, "blocks of one call broadcast together"
    return [
        x if tuple(x.shape[:-tail]) == lead else xp.broadcast_to(x, (*lead, *x.shape[-tail:]))
        for x in pieces
    ]


def _segment_blocks(p: Problem, rows: int, run: Run | None) -> list[tuple[int, int, bool]]:
    """(q_lo, q_hi, in_run) for every block in order: blocks of ``rows`` rows before and
    after the run, and the run's rows as one entry with in_run True."""
    if run is None:
        return [(a, min(a + rows, p.L), False) for a in range(0, p.L, rows)]
    before = [(a, min(a + rows, run.q_lo), False) for a in range(0, run.q_lo, rows)]
    after = [(a, min(a + rows, p.L), False) for a in range(run.q_hi, p.L, rows)]
    return [*before, (run.q_lo, run.q_hi, True), *after]


def _attend_run(p: Problem, ops: Prepared, kernels: Any, run: Run) -> tuple[Any, Any] | None:
    """(out (..., q_hi - q_lo, Ev), lse or None) of every block of ``run`` from the
    kernel's one call (with the lse where the call needs it: ``Kernels.run_lse``), or
    None where the kernel declines (then the run's rows go block by block)."""
    q, k, v, mask = run_operands(p, ops, kernels, run)
    if p.need_lse:
        if kernels.run_lse is None:
            return None
        return kernels.run_lse(q, k, v, mask, p.scale, run.rows)
    out = kernels.run(q, k, v, mask, p.scale, run.rows)
    return None if out is None else (out, None)
