"""The backward pass of attention, block by block, from the saved output and lse.

For query rows [q_lo, q_hi) against the key columns their tile allows, in the compute
dtype::

    P   = exp(scores - lse)  where allowed, else 0      # (..., Bq, Sk), recomputed
    P   = P / rowsum(P)      (whole rows only)
    Pd  = dropout(P)         (the forward's keep pattern, redrawn from the replayed rng)
    dV += Pd^T dO                                        # (..., Sk, Ev)
    dP  = dropout(dO V^T)                                # (..., Bq, Sk)
    dS  = P * (dP - D)       with D = rowsum(dO * O)     # d loss / d scores
    dR  = dS * score_mod'(raw)                           # raw = scale * q k^T
    dQ  = scale * dR K,      dK += scale * dR^T Q
    dM  = dS summed over the additive mask's broadcast axes

Dividing by rowsum(P) (issue 25) keeps the weights exact where a huge finite additive
mask makes lse round (not for a key piece, ``whole_rows=False``); without dropout the
division is applied to dO and D, whose rows it scales (P^T (dO / r) and (P / r) * (dP -
D) = P * ((dO / r) V^T - D / r)), not to the (Bq, Sk) weights. Rows with nothing to
attend get gradient 0; NaN or inf at masked positions never reaches a gradient.
"""

from __future__ import annotations

from typing import Any

from ..dropout import keep_pattern
from ..nan_guard import neutralize
from ..problem import Problem
from ..score_mods import score_mod_derivative
from .accumulate import SegmentSums, sum_to_shape
from .block import tile_scores
from .fused_backward import FUSED_ROWS, backward_run, block_grads, fused_kernels, run_grads
from .operands import Prepared
from .tiles import block_plan, block_tile, scatter_columns, select_rows

__all__ = ["block_ranges", "blocked_backward", "weight_grads"]


def block_ranges(p: Problem, rows: int) -> list[tuple[int, int]]:
    """(q_lo, q_hi) of every block of ``rows`` rows, in the forward's order (the stream
    numbers of dropout are their indices)."""
    return [(a, min(a + rows, p.L)) for a in range(0, p.L, rows)]


def blocked_backward(
    p: Problem,
    ops: Prepared,
    out: Any,
    lse: Any,
    d_out: Any,
    rows: int,
    mask_grad: bool = True,
    whole_rows: bool = True,
    columns: list[Any] | None = None,
    kernels: Any = None,
) -> tuple[Any, Any, Any, Any]:
    """(dq, dk, dv, d_mask) in the GQA layout and the compute dtype, of the operands'
    layout shapes (``ops``); d_mask None unless ``attn_mask`` is additive.

    ``out`` (..., L, Ev) and ``lse`` (..., L) are the forward pass's (the executor's
    output, compute dtype, GQA layout); ``d_out`` the output's cotangent in that layout;
    ``rows`` the forward's block size; ``p.rng`` must redraw the forward's dropout;
    ``mask_grad=False`` skips d_mask (None); ``whole_rows=False`` when the keys are one
    piece of the call's (``lse`` then covers keys this call does not see): the weights
    are exp(scores - lse) without renormalizing (module docstring). ``columns``: per
    block, the live key columns the forward read (its plan's skipped tiles), or None.
    ``kernels``: the backend's, whose fused backward (``Kernels.block_backward``) takes
    each block where it applies (whole rows, no additive mask, dropout or score_mod,
    operands checked finite): a forward's run of translated blocks is taken block by
    block here (its rows need only their out and lse).
    """
    xp, cd = p.xp, p.compute_dtype
    q_shape, k_shape, v_shape = tuple(ops.query.shape), tuple(ops.key.shape), tuple(ops.value.shape)
    blocks = block_ranges(p, rows)
    mask_shape = None if ops.additive is None or not mask_grad else tuple(ops.additive.shape)
    fused = fused_kernels(p, ops, kernels, whole_rows, mask_shape)
    run = None
    if fused is not None and columns is None:
        rows = max(rows, FUSED_ROWS)  # a fused call's fixed cost: fewer, larger blocks
        blocks = block_ranges(p, rows)
        run = backward_run(p, ops, fused)
        if run is not None:  # blocks before the run, the run, blocks after it
            blocks = [
                *((a, min(a + rows, run.q_lo)) for a in range(0, run.q_lo, rows)),
                (run.q_lo, run.q_hi),
                *((a, min(a + rows, p.L)) for a in range(run.q_hi, p.L, rows)),
            ]
    lives = [None if columns is None else columns[n] for n in range(len(blocks))]
    in_run = [run is not None and lo == run.q_lo for lo, _ in blocks]
    tiles = [
        None if inside else block_tile(p, lo, hi, live)
        for (lo, hi), live, inside in zip(blocks, lives, in_run, strict=True)
    ]
    cuts = {b for t in tiles if t is not None for r in t.ranges for b in r}
    if run is not None:
        cuts |= {run.k_lo, run.k_hi}
    dq_parts, dmask_parts = [], []
    dk_sums, dv_sums = SegmentSums(xp, p.S, cuts), SegmentSums(xp, p.S, cuts)
    for stream, ((q_lo, q_hi), t) in enumerate(zip(blocks, tiles, strict=True)):
        if in_run[stream]:  # a window's interior in one fused call
            dq_run, dk_run, dv_run = run_grads(p, ops, fused, run, out, lse, d_out)
            dq_parts.append(dq_run)  # (..., run rows, E)
            dk_sums.add(run.k_lo, run.k_hi, dk_run)  # (..., run keys, E)
            dv_sums.add(run.k_lo, run.k_hi, dv_run)
            continue
        if t is None:  # no key in reach: zero gradients for these rows
            dq_parts.append(xp.zeros((*q_shape[:-2], q_hi - q_lo, q_shape[-1]), dtype=cd,
                                     device=p.device))  # fmt: skip
            if mask_shape is not None:
                none = xp.zeros((q_hi - q_lo, p.S), dtype=cd, device=p.device)
                dmask_parts.append(_mask_rows(p, none, mask_shape))
            continue
        grads = None
        if fused is not None and fused.block_backward is not None:
            grads = block_grads(p, ops, fused, t, q_lo, q_hi, out, lse, d_out, lives[stream])
        if grads is None:
            grads = _block_backward(
                p, ops, t, q_lo, q_hi, stream, out, lse, d_out, whole_rows, lives[stream]
            )
        dq_b, dk_b, dv_b, ds = grads
        # to the key/value heads (GQA groups summed) before adding
        dk_b = sum_to_shape(xp, dk_b, (*k_shape[:-2], dk_b.shape[-2], k_shape[-1]))
        dv_b = sum_to_shape(xp, dv_b, (*v_shape[:-2], dv_b.shape[-2], v_shape[-1]))
        dq_parts.append(sum_to_shape(xp, dq_b, (*q_shape[:-2], q_hi - q_lo, q_shape[-1])))
        at = 0
        for lo, hi in t.ranges:  # the tile's columns, range by range
            dk_sums.add(lo, hi, dk_b[..., at : at + hi - lo, :])
            dv_sums.add(lo, hi, dv_b[..., at : at + hi - lo, :])
            at += hi - lo
        if mask_shape is not None:
            full = scatter_columns(xp, ds, t.ranges, p.S, p.device)  # (..., Bq, S)
            dmask_parts.append(_mask_rows(p, full, mask_shape))
    dq = dq_parts[0] if len(dq_parts) == 1 else xp.concat(dq_parts, axis=-2)  # (..., L, E)
    dk = dk_sums.result(k_shape, cd, p.device)  # (..., S, E)
    dv = dv_sums.result(v_shape, cd, p.device)  # (..., S, Ev)
    d_mask = None
    if mask_shape is not None:
        if mask_shape[-2] == 1:  # one mask row for all queries: the blocks' sums add
            d_mask = dmask_parts[0]
            for part in dmask_parts[1:]:
                d_mask = d_mask + part
        else:
            d_mask = dmask_parts[0] if len(dmask_parts) == 1 else xp.concat(dmask_parts, axis=-2)
    return dq, dk, dv, d_mask


def _mask_rows(p: Problem, ds: Any, mask_shape: tuple[int, ...]) -> Any:
    """One block's dS (..., Bq, S) summed to the additive mask's broadcast shape for
    these rows (..., Bq|1, S|1)."""
    rows = ds.shape[-2] if mask_shape[-2] != 1 else 1
    return sum_to_shape(p.xp, ds, (*mask_shape[:-2], rows, mask_shape[-1]))


def _block_backward(
    p: Problem,
    ops: Prepared,
    t: Any,
    q_lo: int,
    q_hi: int,
    stream: int,
    out: Any,
    lse: Any,
    d_out: Any,
    whole_rows: bool = True,
    live: Any = None,
) -> tuple[Any, Any, Any, Any]:
    """(dq (..., Bq, E), dk (..., Sk, E), dv (..., Sk, Ev), dS (..., Bq, Sk)) of one block
    over its tile's columns (within ``live``), before any sum over broadcast axes."""
    xp = p.xp
    _, allowed = block_plan(p, ops, q_lo, q_hi, live)  # (..., Bq, Sk) bool or None
    q = ops.query[..., q_lo:q_hi, :]  # (..., Bq, E)
    k = select_rows(xp, ops.key, t.ranges)  # (..., Sk, E)
    v = select_rows(xp, ops.value, t.ranges)  # (..., Sk, Ev)
    dO = d_out[..., q_lo:q_hi, :]  # (..., Bq, Ev)
    D = xp.sum(dO * out[..., q_lo:q_hi, :], axis=-1)  # (..., Bq): rowsum(dO * O)
    return _tile_backward(p, ops, t, allowed, q, k, v, lse[..., q_lo:q_hi], dO, D, stream,
                          whole_rows)  # fmt: skip


def _tile_backward(
    p: Problem,
    ops: Prepared,
    t: Any,
    allowed: Any,
    q: Any,
    k: Any,
    v: Any,
    lse_b: Any,
    dO: Any,
    D_b: Any,
    stream: int,
    whole_rows: bool,
) -> tuple[Any, Any, Any, Any]:
    """:func:`_block_backward` on the block's operands: q (..., Bq, E), k (..., Sk, E),
    v (..., Sk, Ev), and the block's rows of lse (..., Bq), d_out (..., Bq, Ev) and
    D = rowsum(dO * O) (..., Bq); ``allowed`` (..., Bq, Sk) or None."""
    xp = p.xp
    if allowed is not None and not ops.finite:
        q, k, v = neutralize(xp, q, k, v, allowed)
    raw, modified, scores = tile_scores(p, ops, t, q, k)  # (..., Bq, Sk)
    D = D_b[..., None]  # (..., Bq, 1)
    if allowed is None and ops.additive is None and p.score_mod is None and ops.finite:
        P = xp.exp(scores - lse_b[..., None])  # every row has finite scores: lse finite
    else:
        live = xp.isfinite(lse_b)  # False on rows with nothing to attend (lse = -inf)
        shift = xp.where(live, lse_b, xp.zeros_like(lse_b))
        e = xp.exp(scores - shift[..., None])  # (..., Bq, Sk)
        keep = live[..., None] if allowed is None else (allowed & live[..., None])
        P = xp.where(keep, e, xp.zeros_like(e))  # the forward's weights, 0 where not allowed
    if whole_rows:  # exact weights even where lse's rounding absorbed log(n) (docstring)
        total = xp.sum(P, axis=-1, keepdims=True)  # (..., Bq, 1): 1 unless lse rounded
        total = xp.where(total > 0, total, xp.ones_like(total))
        if p.dropout_p > 0:
            P = P / total
        else:  # the same dV and dS with the division on the rows' dO and D, not on P
            dO, D = dO / total, D / total
    return weight_grads(p, ops, t, raw, modified, P, q, k, v, dO, D, stream)


def weight_grads(
    p: Problem, ops: Prepared, t: Any, raw: Any, modified: Any, P: Any, q: Any, k: Any,
    v: Any, dO: Any, D: Any, stream: Any,
) -> tuple[Any, Any, Any, Any]:  # fmt: skip
    """(dq (..., Bq, E), dk (..., Sk, E), dv (..., Sk, Ev), dS (..., Bq, Sk)) of a tile
    from its weights ``P`` (..., Bq, Sk) (0 where not allowed), its scores before and
    after the score modifier, its operands, dO (..., Bq, Ev) and D = rowsum(dO * O)
    (..., Bq, 1); ``stream`` redraws the forward's dropout. The module docstring's
    formula, written once for the row blocks and the tiles."""
    xp = p.xp
    dP = dO @ xp.matrix_transpose(v)  # (..., Bq, Sk): d loss / d dropped weights
    Pd = P
    if p.dropout_p > 0:
        kept, keep_prob = keep_pattern(p, P, stream)
        Pd = xp.where(kept, P / keep_prob, xp.zeros_like(P))
        dP = xp.where(kept, dP / keep_prob, xp.zeros_like(dP))
    dv = xp.matrix_transpose(Pd) @ dO  # (..., Sk, Ev)
    dS = P * (dP - D)  # (..., Bq, Sk)
    if not ops.finite:  # a masked pair's 0 * (inf - D) is NaN: exactly 0 there
        dS = xp.where(P != 0, dS, xp.zeros_like(dS))
    dR = dS
    if p.score_mod is not None:
        slope = score_mod_derivative(
            p.score_mod, p.backend, xp, raw, modified, t, p.num_heads, p.gqa_groups
        )
        if not (isinstance(slope, float) and slope == 1.0):
            dR = dS * slope
    dq = (dR @ k) * p.scale  # (..., Bq, E)
    dk = (xp.matrix_transpose(dR) @ q) * p.scale  # (..., Sk, E)
    return dq, dk, dv, dS
