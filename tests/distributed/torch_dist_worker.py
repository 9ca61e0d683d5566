"""One gloo process of the torch.distributed tests: runs every check inside one process
group and writes ``{check: {"ok": bool, "detail": str}}`` to ``<out>/rank<r>.json``.

Run by tests/distributed/test_torch_distributed.py as
``python torch_dist_worker.py RANK WORLD INIT_FILE OUT_DIR SEED``. Each check compares this
rank's output and gradient shards with the one-process core on the whole sequence. The
``random_*`` checks are differential property tests: calls drawn from SEED (the same on
every rank; the test draws a fresh one each run and prints it), forward and gradients
against one process, and bad calls that must raise an attnkit error on every rank.
"""

from __future__ import annotations

import json
import random
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from attnkit.backends.torch.distributed import (
    ring_attention,
    ulysses_attention,
    zigzag_shard,
    zigzag_unshard,
)
from attnkit.backends.torch.distributed.ring import _Plan

import attnkit as ak
from attnkit.errors import DeviceMismatchError, ParameterError, ShapeError

RANK, WORLD = int(sys.argv[1]), int(sys.argv[2])
SEED = int(sys.argv[5]) if len(sys.argv) > 5 else 0
#: How many random calls each ``random_*`` check draws.
RANDOM_CALLS = 10
RESULTS: dict[str, dict[str, Any]] = {}


def check(name: str) -> Callable[[Callable[[], str]], None]:
    """Run ``fn`` now; record ok and its detail string, or the failure."""

    def run(fn: Callable[[], str]) -> None:
        try:
            RESULTS[name] = {"ok": True, "detail": fn() or ""}
        except Exception:  # recorded: the test prints it
            RESULTS[name] = {"ok": False, "detail": traceback.format_exc()}

    return run


def inputs(shape_q: tuple, shape_k: tuple, dtype: Any, ev: int | None = None) -> list[Any]:
    """q, k, v (Ev features, default E) and a cotangent for the whole sequence, equal on
    every rank."""
    g = torch.Generator().manual_seed(0)
    shape_v = (*shape_k[:-1], ev or shape_k[-1])
    q = torch.randn(shape_q, generator=g, dtype=torch.float64)
    k = torch.randn(shape_k, generator=g, dtype=torch.float64)
    v = torch.randn(shape_v, generator=g, dtype=torch.float64)
    w = torch.randn((*shape_q[:-1], shape_v[-1]), generator=g, dtype=torch.float64)
    return [x.to(dtype) for x in (q, k, v, w)]


def shard(x: Any, layout: str) -> Any:
    if layout == "zigzag":
        return zigzag_shard(x, RANK, WORLD)
    n = x.shape[-2] // WORLD
    return x[..., RANK * n : (RANK + 1) * n, :]


def core_grads(q: Any, k: Any, v: Any, w: Any, **kw: Any) -> list[Any]:
    """The one-process core's output and gradients of sum(out * w)."""
    q, k, v = (x.detach().clone().requires_grad_() for x in (q, k, v))
    out = ak.scaled_dot_product_attention(q, k, v, **kw)
    (out * w).sum().backward()
    return [out.detach(), q.grad, k.grad, v.grad]


def dist_grads(fn: Any, q: Any, k: Any, v: Any, w: Any, layout: str, **kw: Any) -> list[Any]:
    """This rank's output shard and the gradients of its shards (sum of every rank's
    sum(out_r * w_r))."""
    ql, kl, vl = (shard(x, layout).detach().clone().requires_grad_() for x in (q, k, v))
    out = fn(ql, kl, vl, layout=layout, **kw)
    (out * shard(w, layout)).sum().backward()
    return [out.detach(), ql.grad, kl.grad, vl.grad]


def compare(
    fn: Any,
    layout: str,
    sq: tuple,
    sk: tuple,
    dtype: Any,
    tol: float,
    ev: int | None = None,
    **kw: Any,
) -> str:
    q, k, v, w = inputs(sq, sk, dtype, ev)
    want = [shard(x, layout) for x in core_grads(q, k, v, w, **kw)]
    got = dist_grads(fn, q, k, v, w, layout, **kw)
    errs = []
    for name, a, b in zip(("out", "dq", "dk", "dv"), got, want, strict=True):
        if not bool(torch.isfinite(a).all()):
            raise AssertionError(f"{name} has NaN/inf")
        err = float((a - b).abs().max()) if a.numel() else 0.0
        if not err <= tol:
            raise AssertionError(f"{name}: max error {err:.3g} > allowed {tol:.3g}, {sq} {sk}")
        errs.append(f"{name} {err:.2g}")
    return ", ".join(errs)


def low_precision(fn: Any, layout: str, **kw: Any) -> str:
    """float32 against the float64 core: max|dist32 - gold| <= rho max|core32 - gold| +
    floor (rho = 2 outputs, 5 gradients; floor 1e-6)."""
    sq = sk = (1, 4, 8 * WORLD, 16)
    q, k, v, w = inputs(sq, sk, torch.float64)
    gold = [shard(x, layout) for x in core_grads(q, k, v, w, **kw)]
    q32, k32, v32, w32 = (x.float() for x in (q, k, v, w))
    core32 = [shard(x, layout) for x in core_grads(q32, k32, v32, w32, **kw)]
    got = dist_grads(fn, q32, k32, v32, w32, layout, **kw)
    parts = []
    for i, name in enumerate(("out", "dq", "dk", "dv")):
        rho = 2 if i == 0 else 5
        err = float((got[i].double() - gold[i]).abs().max())
        allowed = rho * float((core32[i].double() - gold[i]).abs().max()) + 1e-6
        if not err <= allowed:
            raise AssertionError(f"float32 {name}: error {err:.3g} > allowed {allowed:.3g}")
        parts.append(f"{name} {err:.2g}<={allowed:.2g}")
    return ", ".join(parts)


def raises(kind: type, words: str, fn: Callable[[], Any]) -> str:
    try:
        fn()
    except kind as e:
        if words.lower() not in str(e).lower():
            raise AssertionError(f"message lacks {words!r}: {e}") from e
        return str(e)[:300]
    raise AssertionError(f"no {kind.__name__} raised")


def shard_ids(ids: Any, layout: str) -> Any:
    """This rank's segment ids (B, L / P), in the layout's order."""
    if layout == "zigzag":
        return zigzag_shard(ids, RANK, WORLD, dim=-1)
    n = ids.shape[-1] // WORLD
    return ids[..., RANK * n : (RANK + 1) * n]


def _and_mask(a: Any, b: Any) -> Any:
    return a if b is None else a & b


def draw_call(rng: random.Random) -> tuple:
    """One random legal call: (fn, layout, q shape, k shape, Ev, kwargs, segment ids or
    None). Ring: any heads, GQA, causal (either alignment), windows, scale, a structured
    mask, a score_mod, packed segments; Ulysses: heads divisible by P."""
    fn = rng.choice(["ring", "ulysses"])
    layout = rng.choice(["zigzag", "contiguous"])
    B = rng.choice([1, 2])
    if fn == "ulysses":
        hkv = WORLD
        hq = hkv * rng.choice([1, 2])
    else:
        hkv = rng.choice([1, 2, 3])
        hq = hkv * rng.choice([1, 2])
    L = 2 * WORLD * rng.choice([2, 3, 4])  # zigzag: 2 chunks per rank
    E = rng.choice([4, 8])
    ev = rng.choice([None, 6])
    kw: dict[str, Any] = {}
    if hq != hkv:
        kw["enable_gqa"] = True
    if rng.random() < 0.6:
        kw["is_causal"] = True
        if rng.random() < 0.3:
            kw["causal_alignment"] = "bottom_right"
    if rng.random() < 0.4:
        left = rng.randrange(0, L)
        kw["window"] = (left, 0 if kw.get("is_causal") else rng.randrange(0, L))
    if rng.random() < 0.3:
        kw["scale"] = rng.uniform(0.1, 1.0)
    if fn == "ring" and rng.random() < 0.2:
        kw["attn_mask"] = ak.masks.sliding_window((rng.randrange(1, L), rng.randrange(0, L)))
    if fn == "ring" and rng.random() < 0.2:
        kw["score_mod"] = ak.score_mods.softcap(rng.uniform(1.0, 5.0))
    ids = None
    if rng.random() < 0.35:
        g = torch.Generator().manual_seed(rng.randrange(2**31))
        docs = torch.randint(1, 5, (B,), generator=g)
        ids = torch.stack([torch.arange(L) * int(d) // L for d in docs])  # (B, L)
    return fn, layout, (B, hq, L, E), (B, hkv, L, E), ev, kw, ids


def draw_bad_call(rng: random.Random, good: list[Any]) -> tuple[str, type, str, Callable]:
    """One random bad call, the same on every rank: (what, error class, words its message
    must hold, the call)."""
    q, k, v = good
    fn = rng.choice([ring_attention, ulysses_attention])
    cases = [
        ("rank-1 query", ShapeError, "query", lambda: fn(q[0, 0, 0], k, v)),
        ("key features differ", ShapeError, "features", lambda: fn(q, k[..., :4], v)),
        ("dropout", ParameterError, "dropout", lambda: fn(q, k, v, dropout_p=0.5)),
        ("negative window", ParameterError, "window", lambda: fn(q, k, v, window=(-1, 0))),
        ("unknown layout", ParameterError, "layout", lambda: fn(q, k, v, layout="striped")),
        ("integer query", ak.DTypeError, "dtype", lambda: fn(q.long(), k, v)),
        ("GQA heads", ShapeError, "heads", lambda: fn(q[:, :1].expand(1, 3, -1, -1), k, v,
                                                     enable_gqa=True)),
    ]  # fmt: skip
    what, kind, words, call = rng.choice(cases)
    return f"{fn.__name__}: {what}", kind, words, call


def main() -> None:
    init, out_dir = sys.argv[3], Path(sys.argv[4])
    dist.init_process_group("gloo", init_method=init, rank=RANK, world_size=WORLD)
    f64, n = torch.float64, 8 * WORLD  # whole lengths: 2 zigzag chunks of 4 per rank
    T = 1e-12
    ring, uly = ring_attention, ulysses_attention
    check("ring_zigzag_causal_gqa")(
        lambda: compare(ring, "zigzag", (2, 4, n, 8), (2, 2, n, 8), f64, T, is_causal=True,
                        enable_gqa=True))  # fmt: skip
    check("ring_contiguous_full")(
        lambda: compare(ring, "contiguous", (1, 2, n, 8), (1, 2, n, 8), f64, T, ev=6)
    )
    check("ring_zigzag_causal_window")(
        lambda: compare(ring, "zigzag", (1, 2, n, 8), (1, 2, n, 8), f64, T, is_causal=True,
                        window=(5, 0)))  # fmt: skip
    check("ring_contiguous_window_two_sided")(
        lambda: compare(ring, "contiguous", (1, 2, n, 8), (1, 2, n, 8), f64, T, window=(3, 6))
    )
    check("ring_bottom_right_L_ne_S")(
        lambda: compare(ring, "zigzag", (1, 2, n, 8), (1, 2, 2 * n, 8), f64, T, is_causal=True,
                        causal_alignment="bottom_right", q_offset=3, kv_offset=1))  # fmt: skip
    check("ring_structured_mask")(
        lambda: compare(ring, "contiguous", (1, 2, n, 8), (1, 2, n, 8), f64, T,
                        attn_mask=ak.masks.causal() & ak.masks.sliding_window((7, 0))))  # fmt: skip
    check("ring_documents_causal")(
        lambda: compare(ring, "zigzag", (1, 2, n, 8), (1, 2, n, 8), f64, T, is_causal=True,
                        attn_mask=ak.masks.documents([5, n - 18, 13])))  # fmt: skip
    check("ring_score_mod_alibi")(
        lambda: compare(ring, "zigzag", (1, 4, n, 8), (1, 4, n, 8), f64, T, is_causal=True,
                        score_mod=ak.score_mods.alibi(4)))  # fmt: skip

    @check("ring_fully_masked_rows")
    def _() -> str:
        # causal with keys starting at position 8: queries 0..7 have no key at all (rows
        # empty in every shard), and every other row is empty in some shards
        kw = {"is_causal": True, "kv_offset": 8}
        detail = compare(ring, "zigzag", (1, 2, n, 8), (1, 2, n, 8), f64, T, **kw)
        q, k, v, w = inputs((1, 2, n, 8), (1, 2, n, 8), f64)
        out, dq, _, _ = dist_grads(ring, q, k, v, w, "zigzag", **kw)
        pos = shard(torch.arange(n)[:, None].double(), "zigzag")[:, 0]  # this rank's rows
        dead = pos < 8
        if RANK == 0 and not bool(dead.any()):
            raise AssertionError("rank 0 holds no fully masked row")
        if bool(out[..., dead, :].ne(0).any()) or bool(dq[..., dead, :].ne(0).any()):
            raise AssertionError("fully masked rows are not exactly 0")
        return f"{int(dead.sum())} dead rows exactly 0; {detail}"

    check("ring_float32_zigzag_causal")(lambda: low_precision(ring, "zigzag", is_causal=True))
    check("ulysses_zigzag_causal")(
        lambda: compare(uly, "zigzag", (2, 4, n, 8), (2, 4, n, 8), f64, T, is_causal=True)
    )
    check("ulysses_contiguous_gqa_window")(
        lambda: compare(uly, "contiguous", (1, 8, n, 8), (1, 4, n, 8), f64, T, enable_gqa=True,
                        window=(3, 2)))  # fmt: skip
    check("ulysses_float32")(lambda: low_precision(uly, "contiguous", is_causal=True))

    @check("ring_window_skips_steps")
    def _() -> str:
        q, k, v, _ = inputs((1, 1, 16 * WORLD, 4), (1, 1, 16 * WORLD, 4), f64)
        ql, kl, vl = (shard(x, "contiguous") for x in (q, k, v))
        from attnkit.backends.torch.distributed.checks import check_call

        kw = {"is_causal": True, "window": (4, 0)}
        call = check_call("ring_attention", ql, kl, vl, None, "contiguous", kw)
        plan = _Plan(call, "contiguous")
        pairs = sum(len(s) for s in plan.steps)
        limit = 1 if RANK == 0 else 2  # own block and the previous one only
        if pairs != limit:
            raise AssertionError(f"rank {RANK} computes {pairs} pairs, expected {limit}")
        return f"{pairs} of {WORLD} steps computed"

    @check("zigzag_roundtrip")
    def _() -> str:
        x = torch.arange(2 * 4 * WORLD * 3.0).reshape(2, 4 * WORLD, 3)
        shards = [zigzag_shard(x, r, WORLD) for r in range(WORLD)]
        if not torch.equal(zigzag_unshard(shards), x):
            raise AssertionError("unshard(shard(x)) != x")
        return raises(ShapeError, "pad", lambda: zigzag_shard(x[:, :-1], 0, WORLD))

    @check("dtensor_batch_head_parallel")
    def _() -> str:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Shard, distribute_tensor

        q, k, v, _ = inputs((2, 4, 12, 8), (2, 4, 10, 8), f64)
        mesh = init_device_mesh("cpu", (WORLD,))
        qd, kd, vd = (distribute_tensor(x, mesh, [Shard(1)]) for x in (q, k, v))  # heads
        local = ak.scaled_dot_product_attention(qd.to_local(), kd.to_local(), vd.to_local(),
                                                is_causal=True)  # fmt: skip
        out = DTensor.from_local(local, mesh, [Shard(1)]).full_tensor()  # (2, 4, 12, 8)
        want = ak.scaled_dot_product_attention(q, k, v, is_causal=True)
        err = float((out - want).abs().max())
        if not err <= T or tuple(local.shape) != (2, 4 // WORLD, 12, 8):
            raise AssertionError(f"error {err}, local shape {tuple(local.shape)}")
        return f"error {err:.2g}"

    @check("ring_bfloat16_zigzag_causal")
    def _() -> str:
        # bfloat16 in and out; within 4x the one-process core's own error against float64
        # of the same rounded inputs (merges and gradient sums run in float32)
        q, k, v, w = (x.bfloat16() for x in inputs((1, 4, n, 16), (1, 4, n, 16), f64))
        gold = [shard(x, "zigzag") for x in core_grads(*(x.double() for x in (q, k, v, w)),
                                                       is_causal=True)]  # fmt: skip
        one = [shard(x, "zigzag") for x in core_grads(q, k, v, w, is_causal=True)]
        got = dist_grads(ring, q, k, v, w, "zigzag", is_causal=True)
        parts = []
        for name, a, c, g in zip(("out", "dq", "dk", "dv"), got, one, gold, strict=True):
            if a.dtype != torch.bfloat16:
                raise AssertionError(f"{name} came back as {a.dtype}")
            err = float((a.double() - g).abs().max())
            allowed = 4 * float((c.double() - g).abs().max()) + 1e-6
            if not err <= allowed:
                raise AssertionError(f"bfloat16 {name}: error {err:.3g} > allowed {allowed:.3g}")
            parts.append(f"{name} {err:.2g}<={allowed:.2g}")
        return ", ".join(parts)

    @check("ring_subgroups_batch_x_seq")
    def _() -> str:
        # 2 x 2: batch entry b on ranks {2b, 2b + 1}, each pair one ring of 2 (group=)
        groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]  # every rank makes both
        b, lr = RANK // 2, RANK % 2
        q, k, v, w = inputs((2, 2, n, 8), (2, 2, n, 8), f64)
        want = core_grads(q, k, v, w, is_causal=True)  # the whole batch, one process
        mine = [zigzag_shard(x[b : b + 1], lr, 2) for x in want]
        ql, kl, vl = (zigzag_shard(x[b : b + 1], lr, 2).requires_grad_() for x in (q, k, v))
        out = ring_attention(ql, kl, vl, group=groups[b], is_causal=True)
        (out * zigzag_shard(w[b : b + 1], lr, 2)).sum().backward()
        got = [out.detach(), ql.grad, kl.grad, vl.grad]
        errs = [float((a - c).abs().max()) for a, c in zip(got, mine, strict=True)]
        if not max(errs) <= T:
            raise AssertionError(f"batch {b}, ring rank {lr}: errors {errs}")
        return f"batch {b} ring rank {lr}: max error {max(errs):.2g}"

    # errors: raised on every rank, before any work, and the group stays usable
    good = [shard(x, "zigzag") for x in inputs((1, 2, n, 8), (1, 2, n, 8), f64)[:3]]
    check("error_heads_not_divisible")(
        lambda: raises(ShapeError, "ring_attention", lambda: ulysses_attention(*good))
    )

    @check("error_processes_disagree")
    def _() -> str:
        q = good[0] if RANK != WORLD - 1 else good[0][..., :-2, :]  # one rank shorter
        return raises(ShapeError, "disagree", lambda: ring_attention(q, *good[1:]))

    @check("error_kwargs_disagree")
    def _() -> str:
        return raises(ShapeError, "pad", lambda: ring_attention(*good, is_causal=RANK == 0))

    odd = [x[..., :-1, :] for x in good]
    check("error_odd_zigzag_length")(
        lambda: raises(ShapeError, "multiple of", lambda: ring_attention(*odd))
    )

    @check("error_wrong_device")
    def _() -> str:
        q = good[0].to("meta")
        return raises(DeviceMismatchError, "gloo", lambda: ring_attention(q, *good[1:]))

    @check("error_one_rank_wrong_device")
    def _() -> str:
        q = good[0].to("meta") if RANK == 1 else good[0]
        kind = DeviceMismatchError if RANK == 1 else ParameterError
        return raises(kind, "gloo", lambda: ring_attention(q, *good[1:]))

    dense = torch.ones(n, n, dtype=torch.bool)
    check("error_dense_mask")(
        lambda: raises(
            ParameterError, "attnkit.masks", lambda: ring_attention(*good, attn_mask=dense)
        )
    )

    @check("error_array_masks_in_ring")
    def _() -> str:
        # dense masks and array lengths index the call's own rows: refused in the ring;
        # segment ids must be this process's shard of them
        ids = torch.arange(n).div(5, rounding_mode="floor")[None]  # (1, L) whole sequence
        lens = ak.masks.key_padding(torch.tensor([n - 3]))
        seg = ak.masks.segments(ids)
        for m in (lens, seg | ak.masks.causal(), seg & lens):
            raises(
                ParameterError, "carried by arrays", lambda m=m: ring_attention(*good, attn_mask=m)
            )
        return raises(
            ShapeError, "this process's shard", lambda: ring_attention(*good, attn_mask=seg)
        )

    @check("ring_segments")
    def _() -> str:
        # packed documents by segment ids (batch 2, different packings), with causal and
        # a window, zigzag: this process's ids travel with K/V; against the whole call
        ids = (torch.arange(n) * 5 // n)[None].repeat(2, 1)  # (2, L): 5 documents
        ids[1] = (torch.arange(n) * 3 // n).flip(0)  # 3 documents, ids descending
        kw = {"is_causal": True, "window": (9, 0)}
        q, k, v, w = inputs((2, 2, n, 8), (2, 2, n, 8), f64)
        want = [
            shard(x, "zigzag")
            for x in core_grads(q, k, v, w, attn_mask=ak.masks.segments(ids), **kw)
        ]
        mine = zigzag_shard(ids, RANK, WORLD, dim=-1)  # (2, L / P)
        got = dist_grads(ring, q, k, v, w, "zigzag", attn_mask=ak.masks.segments(mine), **kw)
        errs = [float((a - c).abs().max()) for a, c in zip(got, want, strict=True)]
        if not max(errs) <= T or not all(bool(torch.isfinite(a).all()) for a in got):
            raise AssertionError(f"segments ring: errors {errs}")
        both = ak.masks.segments(mine) & ak.masks.sliding_window((9, 0))  # & a structure
        got2 = dist_grads(ring, q, k, v, w, "zigzag", attn_mask=both, is_causal=True)
        errs2 = [float((a - c).abs().max()) for a, c in zip(got2, want, strict=True)]
        if not max(errs2) <= T:
            raise AssertionError(f"segments & window ring: errors {errs2}")
        return f"max error {max(errs + errs2):.2g}"

    @check("ulysses_segments_and_array_lengths")
    def _() -> str:
        # Ulysses runs the core on the whole sequence: the whole sequence's arrays apply
        ids = (torch.arange(n) * 7 // n)[None].expand(2, n).clone()  # (2, L) 7 documents
        ids[1] = ids[1].flip(0)
        m = ak.masks.segments(ids) & ak.masks.key_padding(torch.tensor([n, n - 5]))
        return compare(uly, "zigzag", (2, 4, n, 8), (2, 4, n, 8), f64, T, attn_mask=m,
                       is_causal=True)  # fmt: skip

    @check("random_calls_match_one_process")
    def _() -> str:
        rng = random.Random(SEED)  # the same draws on every rank
        done = []
        for i in range(RANDOM_CALLS):
            fn_name, layout, sq, sk, ev, kw, ids = draw_call(rng)
            fn = ring if fn_name == "ring" else uly
            q, k, v, w = inputs(sq, sk, f64, ev)
            core_kw = dict(kw)
            if ids is not None:
                core_kw["attn_mask"] = _and_mask(ak.masks.segments(ids), kw.get("attn_mask"))
            want = [shard(x, layout) for x in core_grads(q, k, v, w, **core_kw)]
            dist_kw = dict(kw)
            if ids is not None:  # the ring takes this process's ids; Ulysses the whole
                mine = ids if fn_name == "ulysses" else shard_ids(ids, layout)
                dist_kw["attn_mask"] = _and_mask(ak.masks.segments(mine), kw.get("attn_mask"))
            got = dist_grads(fn, q, k, v, w, layout, **dist_kw)
            for name, a, b in zip(("out", "dq", "dk", "dv"), got, want, strict=True):
                err = float((a - b).abs().max()) if a.numel() else 0.0
                if not bool(torch.isfinite(a).all()) or not err <= T:
                    raise AssertionError(
                        f"seed {SEED}, call {i}: {fn_name}(layout={layout!r}, q {sq}, k {sk}, "
                        f"Ev {ev}, {kw}, segment ids {ids is not None}): {name} error "
                        f"{err:.3g} > {T:g} (or not finite)"
                    )
            done.append(f"{fn_name}/{layout}/{sorted(kw)}")
        return f"seed {SEED}: {len(done)} calls equal one process: " + "; ".join(done)

    @check("random_bad_calls_raise_on_every_rank")
    def _() -> str:
        rng = random.Random(SEED + 1)
        seen = []
        for _ in range(RANDOM_CALLS):
            what, kind, words, call = draw_bad_call(rng, good)
            raises(kind, words, call)
            seen.append(what)
        # the group still works after every refusal (no rank left waiting in a collective)
        compare(ring, "zigzag", (1, 2, n, 8), (1, 2, n, 8), f64, T, is_causal=True)
        return f"seed {SEED + 1}: refused on every rank: {', '.join(seen)}"

    check("error_dropout")(
        lambda: raises(ParameterError, "dropout", lambda: ring_attention(*good, dropout_p=0.1))
    )
    narrow = good[1][..., :4]
    check("error_core_shape")(
        lambda: raises(ShapeError, "features", lambda: ring_attention(good[0], narrow, good[2]))
    )
    check("group_usable_after_errors")(
        lambda: compare(ring, "zigzag", (1, 2, n, 8), (1, 2, n, 8), f64, T, is_causal=True)
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"rank{RANK}.json").write_text(json.dumps(RESULTS))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
