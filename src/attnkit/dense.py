"""Dense exact attention in query blocks: the generic array-API executor.

Rows of the query are processed ``block_size`` at a time, so the score matrix in memory
is (..., Bq, S), never (..., L, S) unless the weights are asked for. Under a structure
(causal, window, and the masks of :mod:`attnkit.masks`) each block reads only the key
columns its rows can see, so causal attention does about half the work of full
attention and a sliding window grows linearly with L.

For one block of rows this computes, in the compute dtype (float32 for 16-bit inputs)::

    scores  = (q * scale) @ k^T                      # (..., Bq, Sk)
    allowed = structure & attn_mask                  # (..., Bq, Sk)
    e, denom, lse = softmax_parts(scores + additive_mask, allowed)   # e = exp(s - max)
    out     = (e @ v) / denom                        # (..., Bq, Ev)

Two exact shortcuts save passes over the (..., Bq, Sk) scores. When the Cauchy-Schwarz
bound ``max_i |q_i| * max_j |k_j|`` (scale folded in) proves that every score lies in
[-T, T] with exp(T) * S far from overflow and exp(-T) a normal number (T about 78 in
float32 at S = 4096, from the dtype's range), the row maximum is not subtracted: the
softmax is the same function and every exp is computed to full relative precision.
And without weights or dropout, ``denom`` comes out of the value product itself: ``e @
[v | 1]`` gives ``e @ v`` and the row sums in one matrix product.

and, when weights or dropout are asked for, ``weights = dropout(e / denom)`` (the weights
applied are the ones returned) and ``out = weights @ v``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from ._validate import Problem, gqa_mask
from .masks import Tile, clip_ranges
from .runs import Run, find_run
from .score_mods import apply_score_mod
from .shapes import broadcast_shapes, prod
from .softmax import softmax_denominator, softmax_numerator, softmax_parts

__all__ = [
    "DEFAULT_BLOCK_BUDGET",
    "RECOMPUTE_ABOVE_ELEMENTS",
    "Prepared",
    "all_finite",
    "apply_dropout",
    "blocked_attention",
    "choose_block_size",
    "empty_result",
    "neutralize",
    "prepare_operands",
]

#: Score elements one query block may hold (x 4 bytes in float32): 2**22 is 16 MiB, which
#: keeps the working set of a block in cache-friendly pieces while making each matmul big
#: enough to run at full speed.
DEFAULT_BLOCK_BUDGET = 2**22


@dataclass(frozen=True)
class Prepared:
    """Operands in the compute dtype, with keys no query may attend zeroed."""

    query: Any  # (..., L, E), not yet multiplied by scale (each block scales its rows)
    key: Any  # (..., S, E)
    value: Any  # (..., S, Ev)
    allowed_mask: Any  # bool mask from attn_mask or None
    additive: Any  # float additive mask or None
    lead: tuple[int, ...]  # broadcast leading dims of all operands
    tile_cache: dict[Any, Any]  # structure tiles by block shape (translation-invariant masks)
    shift_free: bool = False  # every score provably in [-T, T]: exp without the row max
    value_ones: Any = None  # (..., S, Ev + 1): value with a column of ones, or None
    finite: bool = True  # nothing masked, or q, k and v checked finite: no guard needed


def prepare_operands(p: Problem, shortcuts: bool = False) -> Prepared:
    """Cast to the compute dtype and decide how much guarding the blocks need.

    Where some (query, key) pair is masked and the operands are not known to be finite
    (a concrete check found NaN or inf, or the values are traced under ``jax.jit``), each
    block neutralizes what its rows may not touch (:func:`neutralize`), so that NaN or
    inf stored in keys, values or queries that are masked cannot reach any output or
    gradient through 0 * NaN in the matrix products. ``shortcuts=True`` (the executor
    without weights or dropout) also decides the module docstring's two shortcuts.
    """
    xp, cd = p.xp, p.compute_dtype
    q, k, v = p.query, p.key, p.value
    if q.dtype != cd:
        q, k, v = xp.astype(q, cd), xp.astype(k, cd), xp.astype(v, cd)
    allowed_mask, additive = None, None
    if p.mask is not None:
        if p.mask_is_bool:
            allowed_mask = p.mask
        else:
            additive = p.mask if p.mask.dtype == cd else xp.astype(p.mask, cd)
            allowed_mask = additive != -math.inf
    masked = p.mask is not None or p.structure is not None
    finite = True if not masked else all_finite(xp, q, k, v)
    shapes = [q.shape[:-2], k.shape[:-2], v.shape[:-2]]
    if p.mask is not None:
        shapes.append(p.mask.shape[:-2])
    lead = broadcast_shapes(*shapes)
    assert lead is not None, "validated shapes must broadcast"
    shift_free, value_ones = False, None
    kernel = p.block_kernel
    if shortcuts and p.L and p.S:
        if kernel is None or getattr(kernel, "uses_shift_free", False):
            shift_free = additive is None and p.score_mod is None and _scores_bounded(p, q, k)
        # [v | 1] is a copy of v: worth it where every block reads all keys, eagerly only
        # (under jax.jit XLA's own fusion is faster); a window's blocks sum their few keys
        if kernel is None and shift_free and p.structure is None:
            ones = xp.ones((*v.shape[:-1], 1), dtype=v.dtype, device=p.device)
            value_ones = xp.concat([v, ones], axis=-1)  # (..., S, Ev + 1)
    return Prepared(
        q, k, v, allowed_mask, additive, lead, {}, shift_free, value_ones, finite is True
    )


def all_finite(xp: Any, *arrays: Any) -> bool | None:
    """True when every element of ``arrays`` is finite, False when one is NaN or inf,
    None when the values cannot be read (traced under ``jax.jit``). One sum per array
    (O(size), no temporary): a NaN or inf makes the sum non-finite; a finite sum that
    overflows reads as not finite, which only costs the guarded path."""
    from .attention import _kernel  # here: attention imports this module

    to_float = _kernel(xp, "concrete_float") or float  # torch: detached, no autograd warning
    try:
        return all(math.isfinite(to_float(xp.sum(x))) for x in arrays)
    except (TypeError, RuntimeError, ValueError):  # traced: no concrete value (jax.jit)
        return None


def shift_free_limit(dtype_info: Any, S: int) -> float:
    """The largest T such that scores in [-T, T] need no max subtraction: S * exp(T)
    stays 2**-3 below the largest float and exp(-T) stays 2**3 above the smallest normal
    number (so no exp overflows, underflows or loses precision to subnormals)."""
    top = math.log(dtype_info.max) - math.log(max(S, 1)) - 3 * math.log(2)
    bottom = -math.log(dtype_info.smallest_normal) - 3 * math.log(2)
    return min(top, bottom)


def _scores_bounded(p: Problem, q: Any, k: Any) -> bool:
    """Whether |scale * q_i . k_j| <= shift_free_limit for all pairs, by Cauchy-Schwarz
    (scale^2 max_i |q_i|^2 max_j |k_j|^2 <= T^2; NaN or inf fails the test). Decided on
    concrete values only: under tracing (jax.jit) it is False. Skipped (False) for short
    query or key axes, where the norms would cost more than the passes they save."""
    if min(p.L, p.S) < 2 * q.shape[-1]:
        return False
    from .attention import _kernel  # here: attention imports this module

    xp = p.xp
    to_float = _kernel(xp, "concrete_float") or float  # torch: detached, no autograd warning
    try:
        q_sq = _max_square_norm(xp, q, to_float)  # max_i |q_i|^2
        k_sq = _max_square_norm(xp, k, to_float)  # max_j |k_j|^2
    except (TypeError, RuntimeError, ValueError):  # traced: no concrete value (jax.jit)
        return False
    limit = shift_free_limit(xp.finfo(q.dtype), p.S)
    return p.scale * p.scale * q_sq * k_sq <= limit * limit


def _max_square_norm(xp: Any, x: Any, to_float: Any) -> float:
    """max over rows of |x_r|^2 for x (..., N, E), NaN if any is NaN, read 2**21 elements
    at a time: a backend's vecdot may build the (..., N, E) product first, and a
    temporary over 32 MiB is fresh, page-faulted memory on every call."""
    n = x.shape[-2]
    rows = max(1, (2**21) // max(1, prod(x.shape[:-2]) * x.shape[-1]))
    best = -math.inf
    for lo in range(0, n, rows):
        part = x[..., lo : min(lo + rows, n), :]  # (..., <= rows, E)
        value = to_float(xp.max(xp.vecdot(part, part)))
        if math.isnan(value):
            return value
        best = max(best, value)
    return best


def neutralize(xp: Any, q: Any, k: Any, v: Any, allowed: Any) -> tuple[Any, Any, Any]:
    """q, k, v of one block with zeros where the block's mask leaves them unused: key and
    value rows of columns that no row of ``allowed`` (..., Bq|1, Sk|1) may attend, and
    query rows that may attend nothing. NaN or inf stored there (padding, keys out of a
    window's reach, an empty row's query) then cannot leak into outputs or gradients
    through 0 * NaN in the matrix products. A row or column counts as used when any
    slice sharing it (its broadcast leading dims) uses it, so nothing is copied per head.

    q (..., Bq, E), k (..., Sk, E), v (..., Sk, Ev) -> the same shapes.
    """
    cols = xp.matrix_transpose(_shared_any(xp, allowed, -2, k.shape, v.shape))  # (..., Sk|1, 1)
    rows = _shared_any(xp, allowed, -1, q.shape)  # (..., Bq|1, 1)
    return xp.where(rows, q, 0.0), xp.where(cols, k, 0.0), xp.where(cols, v, 0.0)


def _shared_any(xp: Any, allowed: Any, axis: int, *shapes: tuple[int, ...]) -> Any:
    """any(allowed) over ``axis`` (-1 or -2, kept) and over every leading axis on which an
    operand of one of ``shapes`` is broadcast (size 1 or absent), so the result's leading
    dims broadcast to each operand's without enlarging it."""
    alive = xp.any(allowed, axis=axis, keepdims=True)
    n_lead = alive.ndim - 2
    extra = n_lead - min(len(s) - 2 for s in shapes)  # axes no operand has
    reduce = []
    for i in range(n_lead):
        if alive.shape[i] == 1:
            continue
        sizes = [s[i - (n_lead - len(s) + 2)] if i - (n_lead - len(s) + 2) >= 0 else 1
                 for s in shapes]  # fmt: skip
        if i < extra or any(size == 1 for size in sizes):
            reduce.append(i)
    if reduce:
        alive = xp.any(alive, axis=tuple(reduce), keepdims=True)
    if extra > 0:
        alive = xp.reshape(alive, tuple(alive.shape[extra:]))
    return alive


def empty_result(
    p: Problem, lead: tuple[int, ...], rows: int, need_weights: bool
) -> tuple[Any, Any, Any]:
    """(out 0, weights 0 or None, lse -inf) for ``rows`` query rows with no key in reach.

    The zeros are tied to the inputs by a sum over an empty slice of each (exactly 0, no
    NaN even where the inputs hold NaN), so autograd sees the output depend on query,
    key and value: ``out.sum().backward()`` gives zero gradients rather than an error."""
    xp, cd = p.xp, p.compute_dtype
    tie = _empty_sum(xp, p.query) + _empty_sum(xp, p.key) + _empty_sum(xp, p.value)
    tie = tie if tie.dtype == cd else xp.astype(tie, cd)
    out = xp.zeros((*lead, rows, p.Ev), dtype=cd, device=p.device) + tie
    lse = xp.full((*lead, rows), -math.inf, dtype=cd, device=p.device)
    weights = xp.zeros((*lead, rows, p.S), dtype=cd, device=p.device) if need_weights else None
    return out, weights, lse


def _empty_sum(xp: Any, x: Any) -> Any:
    """0-d exactly 0, computed from an empty slice of x (so it carries x's autograd)."""
    return xp.sum(x[..., :0])


def apply_dropout(p: Problem, weights: Any, stream: int) -> Any:
    """Weights with dropout applied (survivors scaled by 1 / (1 - p)), drawn from the
    backend adapter; ``stream`` numbers the draws of one call (one per block)."""
    from . import backends

    keep_prob = 1.0 - p.dropout_p
    keep = backends.for_namespace(p.xp).dropout_keep(
        p.rng, tuple(weights.shape), keep_prob, like=weights, stream=stream
    )
    return p.xp.where(keep, weights / keep_prob, 0.0)


#: The fixed cost of one block (Python dispatch of a few dozen array calls), expressed in
#: score elements of work: about 60 us against about 3 ns per score element on CPU
#: (fitted on window and dense runs, L = 4096 to 16384, torch and NumPy).
BLOCK_OVERHEAD_ELEMENTS = 20_000

#: Blocks are recomputed in the backward pass (when a backend offers it) only when the
#: scores autograd would otherwise keep, summed over blocks, exceed this many elements
#: (2**26 float32 = 256 MiB per kept tensor). Below it, storing is cheaper than
#: computing twice; windows stay below it up to long sequences.
RECOMPUTE_ABOVE_ELEMENTS = 2**26


def choose_block_size(p: Problem, lead: tuple[int, ...], budget: int = DEFAULT_BLOCK_BUDGET) -> int:
    """Query rows per block: the power of two in [16, 1024] of least estimated cost.

    For each candidate Bq the key columns a block in the middle of the sequence reads
    (Sk: all of S unstructured, about Bq + the window under a window) give the work per
    block, Bq x Sk x heads score elements; the cost of all blocks is
    ceil(L / Bq) x (work + overhead), the overhead BLOCK_OVERHEAD_ELEMENTS (or the
    backend's ``block_overhead_elements``) plus, for a
    backend kernel that loops over heads, its ``overhead_per_head_elements`` times the
    heads. Candidates whose block exceeds the memory ``budget`` are skipped (the
    smallest is kept if none fits): a block holds Bq x Sk x heads score elements, or
    for a kernel that says so (``held_scores(rows, width, heads)``) that many, and at
    least one head's Bq x Sk (the block's mask).
    """
    heads = max(1, prod(lead))
    held = getattr(p.block_kernel, "held_scores", None)
    per_head = getattr(p.block_kernel, "overhead_per_head_elements", 0)
    from .attention import _kernel  # here: attention imports this module

    base = _kernel(p.xp, "block_overhead_elements") or BLOCK_OVERHEAD_ELEMENTS
    overhead = base + heads * per_head
    best, best_cost = None, math.inf
    for rows in (16, 32, 64, 128, 256, 512, 1024):
        rows = min(rows, max(p.L, 1))
        width = _probe_width(p, rows)
        work = rows * width * heads
        memory = work if held is None else max(held(rows, width, heads), rows * width)
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


def _stored_elements(p: Problem, ops: Prepared, blocks: list[tuple[int, int, bool]]) -> int:
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
    return total * prod(ops.lead)


def block_tile(p: Problem, q_lo: int, q_hi: int) -> Tile | None:
    """The key columns rows [q_lo, q_hi) need under the structure, or None if none."""
    g = p.geometry
    ranges = [(0, g.S)] if p.structure is None else p.structure.key_ranges(g, q_lo, q_hi)
    ranges = clip_ranges(ranges, g.S)
    return Tile(p.xp, p.device, g, q_lo, q_hi, ranges) if ranges else None


def allowed_in_tile(p: Problem, ops: Prepared, t: Tile) -> Any:
    """Bool (..., Bq, Sk) of the pairs allowed in the tile (None = all): structure & mask."""
    allowed = None
    if p.structure is not None:
        allowed = _structure_tile(p, ops, t)
        if allowed is not None and p.gqa_groups > 1:
            allowed = gqa_mask(p.xp, allowed, p.gqa_groups)
    if ops.allowed_mask is not None:
        user = t.columns(t.rows(ops.allowed_mask))  # (..., Bq|1, Sk|1)
        allowed = user if allowed is None else allowed & user
    return allowed


def _structure_tile(p: Problem, ops: Prepared, t: Tile) -> Any:
    """The structure's tile, computed once per block shape where the structure depends
    only on key position minus query position (interior blocks of a window all match)."""
    if not p.structure.translation_invariant:
        return p.structure.tile(t)
    key = (t.q_hi - t.q_lo, tuple((lo - t.q_lo, hi - t.q_lo) for lo, hi in t.ranges))
    if key not in ops.tile_cache:
        ops.tile_cache[key] = p.structure.tile(t)
    return ops.tile_cache[key]


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


def block_plan(p: Problem, ops: Prepared, q_lo: int, q_hi: int) -> tuple[Any, Any]:
    """(tile, allowed): the block's key ranges and its bool mask (..., Bq, Sk) or None;
    tile None when no key is in reach."""
    t = block_tile(p, q_lo, q_hi)
    return (None, None) if t is None else (t, allowed_in_tile(p, ops, t))


def attend_block(
    p: Problem,
    ops: Prepared,
    q_lo: int,
    q_hi: int,
    stream: int,
    need_weights: bool,
    plan: tuple[Any, Any] | None = None,
) -> tuple[Any, Any, Any]:
    """Attention for query rows [q_lo, q_hi): (out (..., Bq, Ev), weights or None, lse).

    Only the key columns the structure allows are read; weights, when asked for, span
    all S columns (zeros elsewhere). ``plan`` is :func:`block_plan`'s result when the
    caller computed it already.
    """
    xp = p.xp
    rows = q_hi - q_lo
    t, allowed = block_plan(p, ops, q_lo, q_hi) if plan is None else plan  # allowed (..., Bq, Sk)
    if t is None:  # no key in reach: an empty block
        return empty_result(p, ops.lead, rows, need_weights)
    q = ops.query[..., q_lo:q_hi, :]  # (..., Bq, E)
    k = _select_rows(xp, ops.key, t.ranges)  # (..., Sk, E)
    plain = not (need_weights or p.dropout_p > 0)
    with_ones = ops.value_ones is not None and plain
    v = _select_rows(xp, ops.value_ones if with_ones else ops.value, t.ranges)  # (..., Sk, Ev[+1])
    if allowed is not None and not ops.finite:
        q, k, v = neutralize(xp, q, k, v, allowed)
    kernel = p.block_kernel
    if kernel is not None and (ops.finite or getattr(kernel, "masks_nonfinite", False)):
        mask = _combined_mask(xp, allowed, ops, t)  # a fused kernel computes this block
        out = kernel(q, k, v, mask, p.scale, ops.shift_free)
        if out is not None:
            return out, None, None
    scores = (q * p.scale) @ xp.matrix_transpose(k)  # (..., Bq, Sk), scaled block by block
    if p.score_mod is not None:
        scores = apply_score_mod(p.score_mod, xp, scores, t, p.num_heads, p.gqa_groups)
    if ops.additive is not None:
        scores = scores + t.columns(t.rows(ops.additive))
    maskable = allowed is not None or ops.additive is not None
    if with_ones:
        e, row_max = softmax_numerator(xp, scores, allowed, maskable, ops.shift_free)
        both = e @ v  # (..., Bq, Ev + 1): e @ v and the row sums of e in one product
        denom, lse = softmax_denominator(xp, both[..., p.Ev :], row_max, maskable)
        return both[..., : p.Ev] / denom, None, lse  # (..., Bq, Ev)
    e, denom, lse = softmax_parts(xp, scores, allowed, maskable, ops.shift_free)
    if plain:
        out = (e @ v) / denom  # (..., Bq, Ev): normalizing after the product is cheaper
        return out, None, lse
    weights = e / denom
    if p.dropout_p > 0:
        weights = apply_dropout(p, weights, stream)
    out = weights @ v  # (..., Bq, Ev)
    if need_weights:
        weights = scatter_columns(xp, weights, t.ranges, p.S, p.device)  # (..., Bq, S)
    return out, (weights if need_weights else None), lse


def _combined_mask(xp: Any, allowed: Any, ops: Prepared, t: Tile) -> Any:
    """One mask for a fused kernel: bool ``allowed``, or additive with -inf where masked."""
    if ops.additive is None:
        return allowed
    additive = t.columns(t.rows(ops.additive))
    return additive if allowed is None else xp.where(allowed, additive, -math.inf)


def _select_rows(xp: Any, x: Any, ranges: list[tuple[int, int]]) -> Any:
    """Rows of axis -2 in the ranges: a view for one range, a concatenation otherwise."""
    if len(ranges) == 1:
        lo, hi = ranges[0]
        return x[..., lo:hi, :]
    return xp.concat([x[..., lo:hi, :] for lo, hi in ranges], axis=-2)


def _run_of(p: Problem, ops: Prepared, need_weights: bool) -> Run | None:
    """The run of translated blocks a backend kernel can attend in one call
    (:mod:`attnkit.runs`), or None: only for a kernel with ``run``, without weights and
    without a dense ``attn_mask`` (its tiles differ from block to block)."""
    kernel = p.block_kernel
    if kernel is None or getattr(kernel, "run", None) is None or need_weights:
        return None
    if ops.allowed_mask is not None or ops.additive is not None or not ops.finite:
        return None  # a run's tile masks pairs: its kernel needs finite operands
    return find_run(p, kernel.run_rows)


def _segment_blocks(p: Problem, rows: int, run: Run | None) -> list[tuple[int, int, bool]]:
    """(q_lo, q_hi, in_run) for every block in order: blocks of ``rows`` rows before and
    after the run, and the run's rows as one entry with in_run True."""
    if run is None:
        return [(a, min(a + rows, p.L), False) for a in range(0, p.L, rows)]
    before = [(a, min(a + rows, run.q_lo), False) for a in range(0, run.q_lo, rows)]
    after = [(a, min(a + rows, p.L), False) for a in range(run.q_hi, p.L, rows)]
    return [*before, (run.q_lo, run.q_hi, True), *after]


def _attend_run(p: Problem, ops: Prepared, run: Run) -> Any:
    """Out (..., q_hi - q_lo, Ev) of every block of ``run`` from the kernel's one call,
    or None where the kernel declines (then the run's rows go block by block)."""
    t = block_tile(p, run.q_lo, run.q_lo + run.rows)  # the first block: (rows, width)
    allowed = None if t is None else allowed_in_tile(p, ops, t)  # (..., rows, width) or None
    q = ops.query[..., run.q_lo : run.q_hi, :]  # (..., blocks * rows, E)
    k = ops.key[..., run.k_lo : run.k_hi, :]  # (..., (blocks - 1) * rows + width, E)
    v = ops.value[..., run.k_lo : run.k_hi, :]  # (..., (blocks - 1) * rows + width, Ev)
    return p.block_kernel.run(q, k, v, allowed, p.scale, run.rows)


def blocked_attention(
    p: Problem, need_weights: bool, block_size: int | None = None, recompute: Any = None
) -> tuple[Any, Any, Any]:
    """Attention over all rows, ``block_size`` rows at a time (default from a memory budget).

    Where the backend kernel attends runs of translated blocks (:mod:`attnkit.runs`: the
    interior of a window), the run's rows go to it in one call and only the blocks
    before and after it go block by block.

    Returns (out (..., L, Ev), weights (..., L, S) or None, lse (..., L)) in the compute
    dtype and in the executor's shapes (GQA axes still split). ``recompute(fn, *inputs)``,
    when given, runs each block so that autodiff recomputes it in the backward pass
    (``torch.utils.checkpoint``, ``jax.checkpoint``) rather than storing its scores.
    """
    xp = p.xp
    ops = prepare_operands(p, shortcuts=not need_weights and p.dropout_p == 0)
    if p.L == 0:
        return empty_result(p, ops.lead, 0, need_weights)
    rows = block_size or choose_block_size(p, ops.lead)
    run = _run_of(p, ops, need_weights)
    run_out = None if run is None else _attend_run(p, ops, run)  # (..., run rows, Ev)
    blocks = _segment_blocks(p, rows, None if run_out is None else run)
    if recompute is not None and _stored_elements(p, ops, blocks) < RECOMPUTE_ABOVE_ELEMENTS:
        recompute = None  # what autograd keeps is small (e.g. a window): no recomputation
    outs, weights, lses = [], [], []
    for stream, (q_lo, q_hi, in_run) in enumerate(blocks):
        if in_run:  # the run's rows, attended above in one kernel call
            out, w, lse = run_out, None, None
        elif recompute is None:
            out, w, lse = attend_block(p, ops, q_lo, q_hi, stream, need_weights)
        else:
            # masks and tiles are built outside the recomputed function: they hold no
            # gradient, and tiles are cached across blocks (JAX must not see them traced)
            plan = block_plan(p, ops, q_lo, q_hi)
            out, w, lse = recompute(
                functools.partial(attend_block, p, ops, q_lo, q_hi, stream, False, plan),
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
