"""Hypothesis strategies drawing :class:`fuzz_oracle.FuzzCase` s for one backend.

Shapes: ranks 2 to 5, leading dims that broadcast (size-1 dims in query against key and
value, tensors of lower rank), GQA heads, L and S including 0, 1 and non-multiples of
the block sizes, E and Ev from 1 to 9. Masks: none, bool and additive arrays in every
broadcast form (stride-0 expanded too), every structured kind of ``attnkit.masks``
combined with & and |. Causal with both alignments, windows (int, pairs, None sides,
also as a mask), offsets, scales (default, negative, tiny, large), score mods, the
backend's dtypes, block sizes 1 to 17, weights and lse on request.

``Sizes`` keeps JAX's draws inside a few shapes (every new shape costs XLA compilations).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import hypothesis.strategies as st
import numpy as np
from fuzz_oracle import ArrayMask, FuzzCase, Node

__all__ = ["FULL", "SMALL", "Sizes", "cases"]

SEEDS = st.integers(0, 2**16 - 1)


@dataclass(frozen=True)
class Sizes:
    lengths: st.SearchStrategy[int]
    features: st.SearchStrategy[int]
    values: st.SearchStrategy[int]
    dims: st.SearchStrategy[int]  # leading dims
    max_rank: int


FULL = Sizes(
    lengths=st.one_of(st.sampled_from([0, 1, 2, 7, 16, 17, 33]), st.integers(1, 40)),
    features=st.integers(1, 9),
    values=st.integers(1, 9),
    dims=st.integers(1, 3),
    max_rank=5,
)
SMALL = Sizes(  # JAX: few shapes, so eager op caches and jit compilations are reused
    lengths=st.sampled_from([0, 1, 6, 13]),
    features=st.sampled_from([3, 8]),
    values=st.sampled_from([2, 8]),
    dims=st.sampled_from([1, 2]),
    max_rank=4,
)


def _sub_shape(draw, full: tuple[int, ...], min_rank: int) -> tuple[int, ...]:
    """A shape that broadcasts to ``full``: a suffix of it, each dim itself or 1."""
    rank = draw(st.integers(min_rank, len(full)))
    return tuple(n if draw(st.booleans()) else 1 for n in full[len(full) - rank :])


@st.composite
def _shapes(draw, sizes: Sizes):
    rank = draw(st.sampled_from([r for r in (2, 3, 3, 4, 4, 4, 5, 5) if r <= sizes.max_rank]))
    lead = [draw(sizes.dims) for _ in range(rank - 2)]
    L, S = draw(sizes.lengths), draw(sizes.lengths)
    E, Ev = draw(sizes.features), draw(sizes.values)
    gqa = rank >= 3 and draw(st.booleans()) and draw(st.booleans())
    if gqa:
        hkv, groups = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        batch = tuple(lead[:-1])
        qb, kb, vb = (_sub_shape(draw, batch, 0) for _ in range(3))
        q = (*qb, hkv * groups, L, E)
        k, v = (*kb, hkv, S, E), (*vb, hkv, S, Ev)
    else:
        q, k, v = (_sub_shape(draw, tuple(lead), 0) for _ in range(3))
        q, k, v = (*q, L, E), (*k, S, E), (*v, S, Ev)
    return q, k, v, gqa


def _pick(draw, n: int, most: int = 3) -> tuple[int, ...]:
    if n == 0:
        return ()
    return tuple(sorted(set(draw(st.lists(st.integers(0, n - 1), max_size=most)))))


@st.composite
def _array_mask(
    draw, kind: str, out_lead: tuple[int, ...], L: int, S: int, floors: bool = False
) -> ArrayMask:
    """``floors``: additive masks may add -1e30 to whole rows (float64 only: see
    :class:`fuzz_oracle.ArrayMask`)."""
    target = (*out_lead, L, S)
    shape = _sub_shape(draw, target, 1 if draw(st.integers(0, 9)) else 0)
    rows = _pick(draw, L) if len(shape) >= 2 and shape[-2] == L else ()
    cols = _pick(draw, S) if len(shape) >= 1 and shape[-1] == S else ()
    floor, floor_rows = 0.0, ()
    rowwise = L > 0 and len(shape) >= 2 and shape[-2] == L
    if floors and kind == "additive" and rowwise and draw(st.booleans()):
        floor, floor_rows = -1e30, tuple(sorted({draw(st.integers(0, L - 1)), *_pick(draw, L)}))
    return ArrayMask(
        kind,
        shape,
        keep=draw(st.sampled_from([0.7, 0.0, 0.3, 0.7, 0.9, 1.0])),
        empty_rows=rows,
        dead_cols=cols,
        bias=draw(st.sampled_from([0.0, 1.0, 6.0])) if kind == "additive" else 0.0,
        expand=draw(st.booleans()),
        seed=draw(SEEDS),
        floor=floor,
        floor_rows=floor_rows,
    )


SIDES = st.one_of(st.none(), st.integers(0, 6))
ALIGN = st.sampled_from(["top_left", "bottom_right"])


@st.composite
def _leaf(draw, out_lead: tuple[int, ...], L: int, S: int, qo: int, ko: int) -> Node:
    batch_ok = len(out_lead) >= 2  # a mask carrying (B, 1) needs a batch and a head axis
    kinds = ["causal", "window", "global", "block_sparse", "dense", "segments"]
    if max(qo + L, ko + S) > 0:
        kinds.append("documents")
    if batch_ok:
        kinds.append("key_padding")
    if L and S:
        kinds.append("bigbird")
    kind = draw(st.sampled_from(kinds))
    if kind == "causal":
        return Node("causal", (draw(ALIGN),))
    if kind == "window":
        return Node("window", (draw(SIDES), draw(SIDES), draw(ALIGN)))
    if kind == "documents":  # lengths sum to the sequence (offsets 0) or cover the call
        total = max(qo + L, ko + S) + (draw(st.integers(0, 5)) if qo or ko else 0)
        cuts = draw(st.lists(st.integers(1, max(1, total - 1)), max_size=3)) if total > 1 else []
        bounds = [0, *sorted(set(cuts)), total]
        return Node("documents", (tuple(b - a for a, b in itertools.pairwise(bounds)),))
    if kind == "global":
        return Node("global", (draw(st.sampled_from([1, 2, 3, 5, 0])),))
    if kind == "block_sparse":
        bq, bk = draw(st.integers(1, 8)), draw(st.integers(1, 8))
        nq = draw(st.integers(1, math.ceil((qo + L + 1) / bq) + 1))
        nk = draw(st.integers(1, math.ceil((ko + S + 1) / bk) + 1))
        density = draw(st.sampled_from([0.0, 0.3, 0.6, 1.0]))
        return Node("block_sparse", (nq, nk, density, draw(SEEDS), (bq, bk)))
    if kind == "bigbird":
        args = (
            L,
            S,
            draw(st.integers(1, 8)),  # block size
            draw(st.integers(1, 3)),  # window blocks
            draw(st.integers(0, 1)),  # global blocks
            draw(st.integers(0, 2)),  # random blocks
            draw(SEEDS),
        )
        return Node("bigbird", args)
    if kind == "dense":
        shape = _sub_shape(draw, (*out_lead, L, S), 1)
        return Node("dense", (shape, draw(st.sampled_from([0.7, 0.9, 0.3, 1.0])), draw(SEEDS)))
    if kind == "segments":
        b = None
        if batch_ok and draw(st.booleans()):
            b = draw(st.sampled_from([out_lead[-2], 1]))
        return Node("segments", (b, L, S, draw(st.integers(1, 3)), draw(SEEDS)))
    b = draw(st.sampled_from([out_lead[-2], 1]))
    lengths = tuple(draw(st.integers(0, ko + S)) for _ in range(b))  # at most the keys there
    return Node("key_padding", (lengths, draw(st.booleans())))


@st.composite
def _structure(draw, *geom) -> Node:
    node = draw(_leaf(*geom))
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 2]))):
        op = draw(st.sampled_from(["and", "or"]))
        node = Node(op, parts=(node, draw(_leaf(*geom))))
    return node


SCALES = st.one_of(
    st.none(),
    st.sampled_from([-0.7, -1.3, 1e-6, 1e-3, 4.0, 12.0]),
    st.floats(0.05, 2.0),
)


@st.composite
def cases(draw, dtypes: tuple[str, ...], sizes: Sizes = FULL, gradients: bool = False):
    """A FuzzCase for a backend with ``dtypes``; ``gradients``: float64 and no softcap
    (the oracle's analytic gradient knows score mods that add to the scores only), and
    additive masks may put a -1e30 floor under whole rows (issue 25, item 6)."""
    q, k, v, gqa = draw(_shapes(sizes))
    if gradients:
        dtype = "float64"
    else:
        wide = [d for d in dtypes if d in ("float32", "float64")]
        dtype = draw(st.sampled_from([*wide, *wide, *(d for d in dtypes if d not in wide)]))
    narrow = dtype in ("float16", "bfloat16")
    offsets = draw(st.sampled_from(["zero", "zero", "zero", "same", "any"]))
    qo = ko = 0
    if offsets != "zero":
        qo = draw(st.sampled_from([1, 3, 7, 12]))
        ko = qo if offsets == "same" else draw(st.sampled_from([0, 1, 2, 5, 11]))
    L, S = q[-2], k[-2]
    if gqa:  # key and value heads stand for Hq query heads
        lead = tuple(np.broadcast_shapes(q[:-2], (*k[:-3], q[-3]), (*v[:-3], q[-3])))
    else:
        lead = tuple(np.broadcast_shapes(q[:-2], k[:-2], v[:-2]))
    kinds = ["none", "bool", "additive", "structured", "structured"]
    kind = draw(st.sampled_from(kinds + ["additive"] * gradients))  # floors: more additive
    mask = None
    if kind in ("bool", "additive"):
        mask = draw(_array_mask(kind, lead, L, S, floors=gradients))
    elif kind == "structured":
        mask = draw(_structure(lead, L, S, qo, ko))
    window = draw(st.sampled_from([None, None, None, 0, 1, 2, 4, 6, (None, 0), (2, None), (0, 3)]))
    if window == 6:  # or any pair
        window = draw(st.one_of(st.integers(0, 6), st.tuples(SIDES, SIDES)))
    score_mod = None
    choice = draw(st.integers(0, 7))
    if choice == 1 and not gradients:
        score_mod = ("softcap", draw(st.sampled_from([0.5, 5.0])))
    elif choice == 2 and (not lead or (len(q) == len(lead) + 2 and q[-3] == lead[-1])):
        score_mod = ("alibi", lead[-1] if lead else 1)  # head = the query's own head axis
    magnitudes = [0.5, 1.0, 3.0] if narrow else [0.5, 1.0, 1.0, 3.0, 30.0]
    return FuzzCase(
        q=q,
        k=k,
        v=v,
        dtype=dtype,
        seed=draw(SEEDS),
        magnitude=draw(st.sampled_from(magnitudes)),
        layout=draw(st.sampled_from(["contiguous", "contiguous", "transposed"])),
        mask=mask,
        is_causal=draw(st.sampled_from([False, False, True])),
        causal_alignment=draw(ALIGN),
        window=window,
        window_mask=window is not None and draw(st.booleans()),
        scale=draw(SCALES),
        enable_gqa=gqa,
        q_offset=qo,
        kv_offset=ko,
        score_mod=score_mod,
        block_size=draw(st.one_of(st.none(), st.integers(1, 17))),
        auto_block_size=draw(st.one_of(st.none(), st.none(), st.integers(1, 17))),
        return_weights=draw(st.booleans()),
        return_lse=draw(st.booleans()),
    )
