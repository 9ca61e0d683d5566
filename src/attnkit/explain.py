"""``attnkit.explain``: the plan of an attention call, without computing it.

It validates the call exactly as :func:`attnkit.scaled_dot_product_attention` does, asks
the dispatcher which path it takes and why faster ones were declined, and walks the
executor's blocks to count the key columns they read and the pairs they attend. Only
masks are evaluated (tile by tile), never scores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from . import _dispatch
from ._problem import Problem
from .blocked.cost import choose_block_size
from .blocked.executor import mapped_run
from .blocked.pairs import PairPlan, pair_plan
from .blocked.translated_runs import find_run
from .masks import Tile, clip_ranges
from .options import Options
from .shapes import broadcast_shapes, prod
from .validation import validate

__all__ = ["AttentionPlan", "explain"]


@dataclass
class AttentionPlan:
    """What a call runs. ``pairs_attended`` counts allowed (query, key) pairs summed over
    the leading dims; ``pairs_computed`` the pairs the blocks read (their tiles);
    ``full_pairs`` leading dims x L x S; ``peak_bytes`` an estimate of the working memory
    beyond the inputs (scores of one block, or of the whole matrix, plus the output)."""

    backend: str
    path: str
    kernel: str | None
    declined: list[str] = field(default_factory=list)
    block_size: int | None = None
    blocks: int = 0
    run_blocks: int = 0
    key_columns: int = 0
    pairs_computed: int = 0
    pairs_attended: int = 0
    full_pairs: int = 0
    peak_bytes: int = 0
    notes: list[str] = field(default_factory=list)
    backward: str = ""  # which backward pass the framework's autodiff runs

    def __str__(self) -> str:
        lines = [f"backend   {self.backend}", f"path      {self.path}"]
        if self.kernel:
            lines.append(f"kernel    {self.kernel}")
        lines += [f"declined  {reason}" for reason in self.declined]
        if self.block_size is not None:
            lines.append(f"blocks    {self.blocks} of up to {self.block_size} query rows")
            if self.run_blocks:
                more = f"{self.run_blocks} more blocks in one kernel call or loop (notes)"
                lines.append(f"run       {more}")
            lines.append(f"keys      {self.key_columns} key columns read over all blocks")
        share = self.pairs_attended / self.full_pairs if self.full_pairs else 0.0
        lines.append(
            f"pairs     {self.pairs_attended:,} attended of {self.full_pairs:,} (L x S x lead: "
            f"{share:.2%}); {self.pairs_computed:,} computed"
        )
        lines.append(f"memory    about {_bytes(self.peak_bytes)} beyond the inputs (estimate)")
        if self.backward:
            lines.append(f"backward  {self.backward}")
        lines += [f"note      {note}" for note in self.notes]
        return "\n".join(lines)


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def explain(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    causal_alignment: str = "top_left",
    window: Any = None,
    return_weights: bool = False,
    return_lse: bool = False,
    q_offset: int = 0,
    kv_offset: int = 0,
    rng: Any = None,
    impl: str = "auto",
    block_size: int | None = None,
    score_mod: Any = None,
) -> AttentionPlan:
    """The plan of ``scaled_dot_product_attention`` with these arguments (the same ones,
    validated the same way, raising the same errors), without computing attention."""
    options = Options.of(locals())  # the non-array arguments, by name
    p = validate(query, key, value, options)
    choice = _dispatch.choose(p)
    heads = prod(p.out_lead)  # the leading dims of the output, (..., Hq)
    itemsize = 8 if p.compute_dtype == p.xp.float64 else 4
    plan = AttentionPlan(p.backend.NAME, choice.path, None, list(choice.declined))
    plan.backward = _backward(p, choice.path)
    plan.full_pairs = heads * p.L * p.S
    out_bytes = heads * p.L * p.Ev * itemsize
    if choice.path == "kernel":
        plan.kernel = _name(choice.kernels.attention)
    if choice.path == "kernel" and (choice.causal or p.mask is not None):
        plan.notes.append(
            "the output is checked finite where pairs are masked; a NaN or inf at a masked "
            "position sends the call to the blocked executor"
        )
    if p.impl == "reference":
        plan.pairs_computed = plan.full_pairs
        plan.pairs_attended = _attended(p, [(0, p.L)], heads)
        plan.peak_bytes = 3 * plan.full_pairs * itemsize + out_bytes
        return plan
    if choice.path == "kernel":
        plan.pairs_attended = _attended(p, [(0, p.L)], heads)
        plan.pairs_computed = plan.pairs_attended if p.structure is not None else plan.full_pairs
        plan.peak_bytes = out_bytes
        return plan
    kernels = choice.kernels
    if kernels is not None and kernels.block is not None:
        plan.kernel = _name(kernels.block)
    rows = p.block_size or choose_block_size(p, p.out_lead, kernels)
    run = None
    if kernels is not None and kernels.run is not None and p.mask is None and not p.need_weights:
        run = find_run(p, kernels.run_rows)
    looped = False
    if run is None:  # the executor's own loop over uniform blocks, where it takes one
        run = mapped_run(p, kernels, rows, p.out_lead)
        looped = run is not None
    pairs = pair_plan(p, kernels, rows) if run is None else None
    if pairs is not None:  # causal: (query block, key block) pairs in the backend's loop
        return _explain_pairs(p, plan, pairs, rows, heads, itemsize, out_bytes)
    spans = _spans(p, rows, run)
    plan.block_size, plan.blocks = rows, len(spans)
    if run is not None:
        plan.run_blocks, plan.blocks = run.blocks, len(spans) - run.blocks
        how = "in one call of the kernel's run"
        if looped:
            how = (
                f"one body in one loop, {p.backend.map_blocks_loop} "
                "(the backward pass loops the same way)"
            )
        what = "the window's interior" if run.stride else "every whole block, all keys"
        plan.notes.append(
            f"a run: {what}, {run.blocks} blocks of {run.rows} rows reading "
            f"{run.width} keys each, {how}"
        )
    if plan.blocks:
        plan.notes.append(
            f"loop: {'the other ' if run is not None else ''}{plan.blocks} block(s) one by one "
            "in Python (unrolled under a compiler)"
        )
    widest = 0
    for q_lo, q_hi in spans:
        width = _width(p, q_lo, q_hi)
        plan.key_columns += width
        plan.pairs_computed += (q_hi - q_lo) * width * heads
        widest = max(widest, (q_hi - q_lo) * width)
    plan.pairs_attended = _attended(p, spans, heads)
    plan.peak_bytes = 3 * widest * heads * itemsize + out_bytes
    if p.need_weights:
        plan.peak_bytes += plan.full_pairs * itemsize
        plan.notes.append("weights are asked for: the (..., L, S) matrix is materialized")
    return plan


def _backward(p: Problem, path: str) -> str:
    """Which backward pass runs when the framework differentiates this call."""
    b = p.backend
    own = b.custom_vjp is not None
    if not own and b.recompute_block is None:
        return "no autodiff here: attnkit.attention_vjp gives the gradients"
    if path == "kernel":
        return "the framework's autodiff of its fused kernel (its own backward)"
    if path == "reference":
        return "the framework's autodiff through the plain formula (stores L x S)"
    if path == "blocked kernels" and not own:
        return "the framework's autodiff through the block kernels (large blocks recomputed)"
    if own and not (p.need_weights or p.need_lse):
        if p.dropout_p > 0 and not b.custom_vjp_replays_dropout:
            return "the framework's autodiff through the executor (dropout: no replayed key)"
        if path == "blocked kernels":
            return (
                "attnkit's backward pass (attnkit.blocked.backward; saves q, k, v, out, lse): "
                "under autograd the forward runs the array-API executor, which gives lse"
            )
        return "attnkit's backward pass (attnkit.blocked.backward; saves q, k, v, out, lse)"
    return "the framework's autodiff through the executor (weights or lse asked for)"


def _name(fn: Any) -> str:
    return f"{fn.__module__}.{getattr(fn, '__qualname__', fn)}"


def _explain_pairs(
    p: Problem,
    plan: AttentionPlan,
    pairs: PairPlan,
    rows: int,
    heads: int,
    itemsize: int,
    out_bytes: int,
) -> AttentionPlan:
    """The plan of a call the executor runs as (query block, key block) pairs
    (:mod:`attnkit.blocked.pairs`), the query rows past the last whole tile in the
    executor's blocks of ``rows``."""
    r = pairs.rows
    tail = [(a, min(a + rows, p.L)) for a in range(pairs.q_hi, p.L, rows)]
    plan.block_size, plan.run_blocks, plan.blocks = rows, pairs.q_hi // r, len(tail)
    full = sum(len(g.starts) for g in pairs.groups if g.full)
    plan.notes.append(
        f"pairs: {pairs.pairs} (query block, key block) tiles of {r} rows, {full} of them "
        f"whole (no mask), in {len(pairs.groups)} loop(s), one per kind of tile, "
        f"{p.backend.map_blocks_loop}; each pair merged into its rows by log-sum-exp "
        "(the backward pass loops over the same pairs)"
    )
    if tail:
        plan.notes.append(f"loop: the last {len(tail)} block(s) one by one in Python")
    for g in pairs.groups:
        plan.key_columns += g.width * len(g.starts)
        plan.pairs_computed += r * g.width * len(g.starts) * heads
    for q_lo, q_hi in tail:
        width = _width(p, q_lo, q_hi)
        plan.key_columns += width
        plan.pairs_computed += (q_hi - q_lo) * width * heads
    plan.pairs_attended = _attended(p, [(0, pairs.q_hi), *tail], heads)
    plan.peak_bytes = 3 * r * max(g.width for g in pairs.groups) * heads * itemsize + out_bytes
    return plan


def _spans(p: Problem, rows: int, run: Any) -> list[tuple[int, int]]:
    """The executor's blocks (a run's blocks one by one)."""
    if run is None:
        return [(a, min(a + rows, p.L)) for a in range(0, p.L, rows)]
    before = [(a, min(a + rows, run.q_lo)) for a in range(0, run.q_lo, rows)]
    inside = [(a, a + run.rows) for a in range(run.q_lo, run.q_hi, run.rows)]
    after = [(a, min(a + rows, p.L)) for a in range(run.q_hi, p.L, rows)]
    return before + inside + after


def _ranges(p: Problem, q_lo: int, q_hi: int) -> list[tuple[int, int]]:
    g = p.geometry
    ranges = [(0, g.S)] if p.structure is None else p.structure.key_ranges(g, q_lo, q_hi)
    return clip_ranges(ranges, g.S)


def _width(p: Problem, q_lo: int, q_hi: int) -> int:
    return sum(hi - lo for lo, hi in _ranges(p, q_lo, q_hi))


def _attended(p: Problem, spans: list[tuple[int, int]], heads: int) -> int:
    """Allowed pairs, counted tile by tile (masks only), summed over the leading dims."""
    xp = p.xp
    user = p.mask
    if user is not None and user.dtype != xp.bool:
        user = user != -math.inf
    total = 0
    for q_lo, q_hi in spans:
        for a in range(q_lo, q_hi, 1024):  # bounded tiles for long single spans
            b = min(q_hi, a + 1024)
            ranges = _ranges(p, a, b)
            if not ranges:
                continue
            t = Tile(xp, p.device, p.geometry, a, b, ranges)
            allowed = p.structure.tile(t) if p.structure is not None else None
            if user is not None:
                part = t.columns(t.rows(user))
                allowed = part if allowed is None else allowed & part
            width = sum(hi - lo for lo, hi in ranges)
            if allowed is None:
                total += (b - a) * width * heads
                continue
            full = xp.broadcast_to(allowed, broadcast_shapes(tuple(allowed.shape),
                                                             (b - a, width)))  # fmt: skip
            count = int(xp.count_nonzero(full))
            total += count * heads // max(1, prod(tuple(full.shape[:-2])))
    return total
