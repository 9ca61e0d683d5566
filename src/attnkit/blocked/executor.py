"""The blocked executor: exact attention over all query rows, one block at a time.

Rows of the query are processed ``block_size`` at a time (default: :mod:`.cost`), so
the scores in memory are (..., Bq, Sk), never (..., L, S) unless the weights are asked
for. Under a structure (causal, windows, :mod:`attnkit.masks`) each block reads only the
key columns its rows can see (:mod:`.tiles`), so causal attention does about half the
work of full attention and a sliding window grows linearly with L. Each block is
:mod:`.block`'s formula. Where the backend's kernel attends runs of translated blocks
(:mod:`.translated_runs`: the interior of a window), the run's rows go to it in one call.
"""

from __future__ import annotations

import functools
from typing import Any

from .._problem import Problem
from ..shapes import broadcast_shapes
from . import cost
from .block import attend_block, attend_tile, block_values
from .loop import map_blocks
from .operands import Prepared, empty_result, prepare_operands
from .pairs import PairPlan, attend_pairs, pair_plan
from .tiles import block_plan, block_tile, kernel_mask
from .translated_runs import Run, find_run, uniform_run

__all__ = ["blocked_attention", "mapped_run"]


def blocked_attention(p: Problem, kernels: Any = None) -> tuple[Any, Any, Any]:
    """Attention over all rows: (out (..., L, Ev), weights (..., L, S) or None, lse (..., L))
    in the compute dtype and the GQA layout (:func:`attnkit._problem.gqa_layout`).

    ``kernels``: the backend's :class:`attnkit.backends.Kernels` to use for blocks and
    runs, or None (the array-API arithmetic only: ``impl="generic"``). Without weights
    or dropout, a backend with ``recompute_block`` (``torch.utils.checkpoint``,
    ``jax.checkpoint``) runs each block so that autodiff recomputes it in the backward
    pass rather than storing its scores, where what it would store is large.
    """
    xp, need_weights = p.xp, p.need_weights
    plain = not need_weights and p.dropout_p == 0
    ops = prepare_operands(p, kernels, shortcuts=plain)
    if p.L == 0:
        return empty_result(p, ops.lead, 0, need_weights)
    rows = p.block_size or cost.choose_block_size(p, ops.lead, kernels)
    run = _run_of(p, ops, kernels, need_weights)
    run_out = None if run is None else _attend_run(p, ops, kernels, run)  # (..., rows, Ev)
    run_lse = None
    if run_out is None:
        run = mapped_run(p, kernels, rows, ops.lead)
        if run is not None:  # the run's blocks through the backend's loop hook
            run_out, run_lse = _map_run(p, ops, run)  # (..., run rows, Ev), (..., run rows)
        else:  # causal: (query block, key block) pairs through the backend's loop hook
            run = pair_plan(p, kernels, rows)
            if run is not None:
                run_out, run_lse = attend_pairs(p, ops, run)  # (..., q_hi, Ev), (..., q_hi)
    blocks = _segment_blocks(p, rows, None if run_out is None else run)
    recompute = p.backend.recompute_block if plain else None
    stored = cost.stored_elements(p, ops.lead, blocks)  # what autograd would keep
    if recompute is not None and stored < cost.RECOMPUTE_ABOVE_ELEMENTS:
        recompute = None  # what autograd keeps is small (e.g. a window): no recomputation
    outs, weights, lses = [], [], []
    for stream, (q_lo, q_hi, in_run) in enumerate(blocks):
        if in_run:  # the run's rows, attended above in one kernel call or one loop
            out, w, lse = run_out, None, run_lse
        elif recompute is None:
            out, w, lse = attend_block(p, ops, kernels, q_lo, q_hi, stream, need_weights)
        else:
            # masks and tiles are built outside the recomputed function: they hold no
            # gradient, and tiles are cached across blocks (JAX must not see them traced)
            plan = block_plan(p, ops, q_lo, q_hi)
            out, w, lse = recompute(
                functools.partial(attend_block, p, ops, kernels, q_lo, q_hi, stream, False, plan),
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


def _common_lead(xp: Any, pieces: list[Any], tail: int) -> list[Any]:
    """``pieces`` broadcast to their common leading dims (all axes but the last ``tail``)."""
    lead = broadcast_shapes(*(tuple(x.shape[:-tail]) for x in pieces))
    assert lead is not None, "blocks of one call broadcast together"
    return [
        x if tuple(x.shape[:-tail]) == lead else xp.broadcast_to(x, (*lead, *x.shape[-tail:]))
        for x in pieces
    ]


def _run_of(p: Problem, ops: Prepared, kernels: Any, need_weights: bool) -> Run | None:
    """The run of translated blocks a backend kernel can attend in one call, or None:
    only for a kernel with ``run``, without weights, without a dense ``attn_mask`` (its
    tiles differ from block to block), on operands checked finite (the run's tile masks
    pairs, and its kernel adds -inf)."""
    if kernels is None or kernels.run is None or need_weights:
        return None
    if ops.allowed_mask is not None or ops.additive is not None or not ops.finite:
        return None
    return find_run(p, kernels.run_rows)


def mapped_run(p: Problem, kernels: Any, rows: int, lead: tuple[int, ...] | None) -> Run | None:
    """The run of uniform blocks of ``rows`` rows that goes through ``Backend.map_blocks``
    (:func:`.translated_runs.uniform_run`: a window's interior, or every whole block of
    unstructured attention), or None. Only where no block kernel takes the blocks (the
    array-API path); without weights, dropout, score mods or an ``attn_mask`` whose rows
    differ (tiles that differ from block to block; a key padding mask (..., 1, S) is the
    same for every block of unstructured attention); and, in a forward pass (``lead``, the
    operands' broadcast leading dims, given) where autodiff would recompute blocks
    because what it would store is large, only if the backend's loop recomputes its body
    too. Every block of the run has the same (rows, width) tile, so one body serves all
    and a compiled program holds it once (the blocks before and after the run, a
    constant number, stay unrolled). Reads the call only (:func:`attnkit.explain` asks
    it too)."""
    if kernels is not None and (kernels.block is not None or kernels.run is not None):
        return None
    if p.need_weights or p.dropout_p > 0 or p.score_mod is not None:
        return None
    mask = p.mask  # (..., L|1, S|1), the allowed or additive mask's shape
    if mask is not None and mask.shape[-2] != 1:  # a mask whose rows differ: tiles differ
        return None
    b = p.backend
    if lead is not None and b.recompute_block is not None and not b.map_blocks_recomputes:
        stored = cost.stored_elements(p, lead, _segment_blocks(p, rows, None))
        if stored >= cost.RECOMPUTE_ABOVE_ELEMENTS:
            return None  # blocks recomputed one by one (torch.utils.checkpoint)
    run = uniform_run(p, rows)
    if run is not None and run.stride and mask is not None and mask.shape[-1] != 1:
        return None  # a window's blocks read other key columns of the mask
    return run


def _map_run(p: Problem, ops: Prepared, run: Run) -> tuple[Any, Any]:
    """(out (..., q_hi - q_lo, Ev), lse (..., q_hi - q_lo)) of every block of ``run``:
    :func:`attend_tile` on each block's slices, through ``Backend.map_blocks``."""
    t, allowed = block_plan(p, ops, run.q_lo, run.q_lo + run.rows)  # (..., rows, width)
    values = block_values(p, ops, False)  # (..., S, Ev[+1])

    def body(q: Any, k: Any, v: Any) -> tuple[Any, Any]:
        out, _, lse = attend_tile(p, ops, None, t, allowed, q, k, v, 0, False)
        return out, lse[..., None]  # (..., rows, Ev), (..., rows, 1)

    starts = [(run.q_lo + i * run.rows, run.k_lo + i * run.stride) for i in range(run.blocks)]
    starts = [(q, k, k) for q, k in starts]  # query, key and value rows of each block
    operands, sizes = (ops.query, ops.key, values), (run.rows, run.width, run.width)
    out, lse = map_blocks(p.backend, body, starts, operands, sizes)
    return out, lse[..., 0]


def _segment_blocks(
    p: Problem, rows: int, run: Run | PairPlan | None
) -> list[tuple[int, int, bool]]:
    """(q_lo, q_hi, in_run) for every block in order: blocks of ``rows`` rows before and
    after the run (or the pairs' rows), and the run's rows as one entry with in_run True."""
    if run is None:
        return [(a, min(a + rows, p.L), False) for a in range(0, p.L, rows)]
    before = [(a, min(a + rows, run.q_lo), False) for a in range(0, run.q_lo, rows)]
    after = [(a, min(a + rows, p.L), False) for a in range(run.q_hi, p.L, rows)]
    return [*before, (run.q_lo, run.q_hi, True), *after]


def _attend_run(p: Problem, ops: Prepared, kernels: Any, run: Run) -> Any:
    """Out (..., q_hi - q_lo, Ev) of every block of ``run`` from the kernel's one call,
    or None where the kernel declines (then the run's rows go block by block)."""
    t = block_tile(p, run.q_lo, run.q_lo + run.rows)  # the first block: (rows, width)
    _, allowed = block_plan(p, ops, run.q_lo, run.q_lo + run.rows)  # (..., rows, width)
    mask = None if t is None else kernel_mask(p, ops, t, allowed, kernels.block_wants_additive)
    q = ops.query[..., run.q_lo : run.q_hi, :]  # (..., blocks * rows, E)
    k = ops.key[..., run.k_lo : run.k_hi, :]  # (..., (blocks - 1) * rows + width, E)
    v = ops.value[..., run.k_lo : run.k_hi, :]  # (..., (blocks - 1) * rows + width, Ev)
    return kernels.run(q, k, v, mask, p.scale, run.rows)
