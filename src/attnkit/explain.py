"""``attnkit.explain``: the plan of an attention call, without computing it.

It validates the call as :func:`attnkit.scaled_dot_product_attention` does and describes
its plan (:func:`attnkit.plan.plan_of`): the path, why faster ones were declined, the
tiles (full, partial, skipped) or blocks, and the pairs attended. Only masks are
evaluated, never scores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .blocked.executor import skipped_columns
from .blocked.operands import prepare_operands
from .blocked.translated_runs import find_run
from .call_checks import validate
from .masks import Tile, clip_ranges
from .masks.geometry import intersect_ranges
from .options import Options
from .plan import Plan, plan_of
from .problem import Problem
from .shapes import broadcast_shapes, prod

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
    strategy: str = ""
    tiles: tuple[int, int, int] = (0, 0, 0)  # (full, partial, skipped) of the tile table
    tile_size: tuple[int, int] | None = None  # (rows, cols) of a tile
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
        if self.strategy:
            lines.append(f"strategy  {self.strategy}")
        if self.kernel:
            lines.append(f"kernel    {self.kernel}")
        lines += [f"declined  {reason}" for reason in self.declined]
        if self.tile_size is not None:
            full, partial, skipped = self.tiles
            rows, cols = self.tile_size
            lines.append(
                f"tiles     {full + partial} of {rows} x {cols}: {full} full, {partial} partial, "
                f"{skipped} skipped"
            )
            lines.append(f"keys      {self.key_columns} key columns read over all tiles")
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
    plan = plan_of(p)
    heads = prod(p.out_lead)  # the leading dims of the output, (..., Hq)
    itemsize = 8 if p.compute_dtype == p.xp.float64 else 4
    result = AttentionPlan(p.backend.NAME, plan.path, None, list(plan.declined), plan.strategy)
    result.backward = _backward(p, plan.path)
    if plan.strategy == "tiles" and result.backward.startswith("attnkit's backward"):
        result.backward = (
            "attnkit's backward pass over the same tiles (attnkit.blocked.tile_backward; "
            "saves q, k, v, out and the rows' maximum and sum)"
        )
    result.full_pairs = heads * p.L * p.S
    out_bytes = heads * p.L * p.Ev * itemsize
    if plan.strategy == "whole call":
        result.kernel = _name(plan.kernels.attention)
        if plan.causal or p.mask is not None:
            result.notes.append(
                "the output is checked finite where pairs are masked; a NaN or inf at a masked "
                "position sends the call to the blocked executor"
            )
        result.pairs_attended = _attended(p, [(0, p.L)], heads)
        result.pairs_computed = (
            result.pairs_attended if p.structure is not None else result.full_pairs
        )
        result.peak_bytes = out_bytes
        return result
    if plan.strategy == "reference":
        result.pairs_computed = result.full_pairs
        result.pairs_attended = _attended(p, [(0, p.L)], heads)
        result.peak_bytes = 3 * result.full_pairs * itemsize + out_bytes
        return result
    if plan.strategy == "tiles":
        return _explain_tiles(p, result, plan, heads, itemsize, out_bytes)
    return _explain_blocks(p, result, plan, heads, itemsize, out_bytes)


def _explain_tiles(
    p: Problem, result: AttentionPlan, plan: Plan, heads: int, itemsize: int, out_bytes: int
) -> AttentionPlan:
    """The plan of a call the tile loop runs (:mod:`attnkit.blocked.tile_loop`)."""
    table = plan.table
    R, C = table.rows, table.cols
    result.tile_size = (R, C)
    result.tiles = (len(table.full), len(table.partial), table.skipped)
    for _, j in (*table.full, *table.partial):
        start = table.key_start(j)
        result.key_columns += max(0, min(p.S, start + C) - start)
    result.pairs_computed = table.tiles * R * C * heads
    result.pairs_attended = _attended(p, [(0, p.L)], heads)
    layout = (
        f"tiles in a band (one per query block of the {table.n_q}, starting at its first key)"
        if table.band
        else f"(query block, key block) tiles of the {table.n_q} x {table.n_k} grid"
    )
    result.notes.append(
        f"tiles: {table.tiles} {layout}, one loop per kind of tile (full, partial), "
        f"{plan.loop}; each merged into its rows by the online softmax (the backward "
        "pass loops over the same tiles)"
    )
    if table.dynamic:
        result.notes.append(
            "the mask's data decides at run time which partial tiles hold a pair: dead "
            "tiles are dropped before the loop where the values are concrete, skipped "
            "inside it where they are traced"
        )
    result.peak_bytes = 3 * R * C * heads * itemsize + out_bytes
    if p.need_weights:
        result.peak_bytes += result.full_pairs * itemsize
        result.notes.append("weights are asked for: the (..., L, S) matrix is materialized")
    return result


def _explain_blocks(
    p: Problem, result: AttentionPlan, plan: Plan, heads: int, itemsize: int, out_bytes: int
) -> AttentionPlan:
    """The plan of a call the row blocks run (one query block at a time, in Python)."""
    kernels = plan.kernels
    if kernels is not None and kernels.block is not None:
        result.kernel = _name(kernels.block)
    rows = plan.rows
    run = None
    if kernels is not None and kernels.run is not None and p.mask is None and not p.need_weights:
        run = find_run(p, kernels.run_rows)
    spans = _spans(p, rows, run)
    result.block_size, result.blocks = rows, len(spans)
    if run is not None:
        result.run_blocks, result.blocks = run.blocks, len(spans) - run.blocks
        result.notes.append(
            f"a run: the window's interior, {run.blocks} blocks of {run.rows} rows reading "
            f"{run.width} keys each, in one call of the kernel's run"
        )
    if result.blocks:
        result.notes.append(
            f"loop: {'the other ' if run is not None else ''}{result.blocks} block(s) one by "
            "one in Python"
        )
    if plan.grid is not None:
        result.notes.append(
            f"the mask's data decides which key blocks of {plan.grid[1]} columns each query "
            "block reads: blocks no row may attend are skipped where the values are concrete"
        )
    columns = None
    if plan.grid is not None:  # the key blocks the mask's data leaves alive, where concrete
        columns = skipped_columns(p, prepare_operands(p, None), plan)
    widest = 0
    for q_lo, q_hi in spans:
        live = None if columns is None else columns[q_lo // rows]
        width = _width(p, q_lo, q_hi, live)
        result.key_columns += width
        result.pairs_computed += (q_hi - q_lo) * width * heads
        widest = max(widest, (q_hi - q_lo) * width)
    result.pairs_attended = _attended(p, spans, heads)
    result.peak_bytes = 3 * widest * heads * itemsize + out_bytes
    if p.need_weights:
        result.peak_bytes += result.full_pairs * itemsize
        result.notes.append("weights are asked for: the (..., L, S) matrix is materialized")
    return result


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


def _width(p: Problem, q_lo: int, q_hi: int, live: Any = None) -> int:
    ranges = _ranges(p, q_lo, q_hi)
    if live is not None:
        ranges = intersect_ranges(ranges, live)
    return sum(hi - lo for lo, hi in ranges)


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
