"""The differential fuzzer's cases and their independent float64 NumPy expectation.

A :class:`FuzzCase` is plain data (shapes, dtype, seeds, keyword arguments, a mask
description), drawn by the strategies of ``fuzz_strategies.py``. This module turns it
into float64 NumPy inputs (rounded to the case's dtype, so the oracle sees exactly what
the backend sees), into the attnkit objects the call takes (structured masks, score
mods), and into the expected result: :func:`oracle.attention` with every structured
mask rebuilt here as a dense bool array from positions alone, never from attnkit::

    query position  qpos = q_offset + i (+ S - L for "bottom_right")
    key position    kpos = kv_offset + j
    causal          kpos <= qpos
    window (l, r)   qpos - l <= kpos <= qpos + r          (None: that side unbounded)
    documents(n)    same document id, ids from the cumulative lengths n
    key_padding(n)  kpos < n[b]                           (dense (B, 1, L, S))
    segments(a, b)  a[..., i] == b[..., j]                (ids (B, L): dense (B, 1, L, S))
    global_tokens   qpos < n or kpos < n                  (top-left positions)
    block_sparse    layout[qpos // bq][kpos // bk], False outside the layout
    bigbird         block_sparse of the mask's own random layout (the layout is data)

It also says, from the oracle's ``allowed`` relation, which key and value rows no query
may attend (dead rows) and which query rows have nothing to attend (empty rows): the
places where poison must not show.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from attnkit import masks as ak_masks
from attnkit import score_mods as ak_score_mods
from attnkit.testing import oracle as ref

__all__ = [
    "ArrayMask",
    "FuzzCase",
    "Node",
    "Problem",
    "alibi_slopes",
    "build_problem",
    "dead_rows",
    "empty_query_rows",
    "key_row_readers",
    "slice_ids",
]

Window = int | tuple[int | None, int | None] | None


def _positions(L: int, S: int, q_offset: int, kv_offset: int, alignment: str = "top_left"):
    shift = S - L if alignment == "bottom_right" else 0
    qpos = q_offset + shift + np.arange(L)[:, None]  # (L, 1)
    kpos = kv_offset + np.arange(S)[None, :]  # (1, S)
    return qpos, kpos


def _short(a: np.ndarray) -> str:
    """An array's values for a failure message (its shape alone when it is large)."""
    a = np.asarray(a)
    return repr(a.tolist()) if a.size <= 48 else f"<array {a.shape}>"


# --- structured masks: each node builds the attnkit mask and its own dense twin ---------


@dataclass(frozen=True)
class Node:
    """A structured mask: ``build(to_bool, to_int)`` gives the attnkit mask (arrays made
    by the two converters), ``dense(L, S, qo, ko)`` the independent bool (..., L, S)."""

    kind: str  # causal window documents key_padding segments global block_sparse bigbird
    # dense and or
    args: tuple[Any, ...] = ()
    parts: tuple[Node, ...] = ()

    def __repr__(self) -> str:
        if self.kind in ("and", "or"):
            op = " & " if self.kind == "and" else " | "
            return "(" + op.join(repr(p) for p in self.parts) + ")"
        return f"{self.kind}{self.args!r}"

    # Arrays held by the array-backed kinds, from their seeds (deterministic).
    def arrays(self) -> tuple[np.ndarray, ...]:
        if self.kind == "segments":
            b, L, S, nseg, seed = self.args
            rng = np.random.default_rng(seed)
            lead = () if b is None else (b,)
            return (rng.integers(0, nseg, (*lead, L)), rng.integers(0, nseg, (*lead, S)))
        if self.kind == "dense":
            shape, keep, seed = self.args
            return (np.random.default_rng(seed).random(shape) < keep,)
        if self.kind == "block_sparse":
            nq, nk, density, seed, _ = self.args
            return (np.random.default_rng(seed).random((nq, nk)) < density,)
        return ()

    def build(self, to_bool, to_int) -> ak_masks.Mask:
        k, a = self.kind, self.args
        if k == "causal":
            return ak_masks.causal(a[0])
        if k == "window":
            return ak_masks.sliding_window((a[0], a[1]), a[2])
        if k == "documents":
            return ak_masks.documents(list(a[0]))
        if k == "key_padding":
            lengths, as_array = a
            return ak_masks.key_padding(to_int(np.asarray(lengths)) if as_array else list(lengths))
        if k == "segments":
            q_ids, kv_ids = self.arrays()
            return ak_masks.segments(to_int(q_ids), to_int(kv_ids))
        if k == "global":
            return ak_masks.global_tokens(a[0])
        if k == "block_sparse":
            return ak_masks.block_sparse(self.arrays()[0].tolist(), a[4])
        if k == "bigbird":
            return _bigbird(*a)
        if k == "dense":
            return ak_masks.dense(to_bool(self.arrays()[0]))
        built = [p.build(to_bool, to_int) for p in self.parts]
        out = built[0]
        for m in built[1:]:
            out = (out & m) if k == "and" else (out | m)
        return out

    def dense(self, L: int, S: int, qo: int, ko: int) -> np.ndarray:
        k, a = self.kind, self.args
        qpos, kpos = _positions(L, S, qo, ko)
        if k == "causal":
            qpos, kpos = _positions(L, S, qo, ko, a[0])
            return kpos <= qpos
        if k == "window":
            left, right, alignment = a
            qpos, kpos = _positions(L, S, qo, ko, alignment)
            ok = np.ones((L, S), bool)
            if left is not None:
                ok &= kpos >= qpos - left
            if right is not None:
                ok &= kpos <= qpos + right
            return ok
        if k == "documents":
            ends = np.cumsum(a[0])[:-1]  # a position >= ends[d] is past document d
            doc_q = np.searchsorted(ends, qpos, side="right")
            doc_k = np.searchsorted(ends, kpos, side="right")
            return doc_q == doc_k
        if k == "key_padding":
            lengths = np.asarray(a[0]).reshape(-1, 1, 1, 1)
            return kpos < lengths  # (B, 1, 1, S)
        if k == "segments":
            q_ids, kv_ids = self.arrays()
            same = q_ids[..., :, None] == kv_ids[..., None, :]  # (..., L, S)
            return same if q_ids.ndim == 1 else same[..., None, :, :]  # (B, 1, L, S)
        if k == "global":
            return (qpos < a[0]) | (kpos < a[0])
        if k in ("block_sparse", "bigbird"):
            if k == "block_sparse":
                layout, (bq, bk) = self.arrays()[0], a[4]
            else:
                m = _bigbird(*a)
                layout, (bq, bk) = np.asarray(m.layout, bool), m.block
            rb, cb = qpos // bq, kpos // bk
            nq, nk = layout.shape
            inside = (rb < nq) & (cb < nk)
            picked = layout[np.minimum(rb, nq - 1), np.minimum(cb, nk - 1)]
            return picked & inside
        if k == "dense":
            return self.arrays()[0]
        out = self.parts[0].dense(L, S, qo, ko)
        for p in self.parts[1:]:
            d = p.dense(L, S, qo, ko)
            out = (out & d) if k == "and" else (out | d)
        return out


@functools.lru_cache(maxsize=256)
def _bigbird(L, S, block, window_blocks, global_blocks, random_blocks, seed):
    return ak_masks.bigbird(
        L,
        S,
        block_size=block,
        window_blocks=window_blocks,
        global_blocks=global_blocks,
        random_blocks=random_blocks,
        seed=seed,
    )


@dataclass(frozen=True)
class ArrayMask:
    """A plain ``attn_mask`` array: bool (True = may attend) or additive float.

    ``shape`` broadcasts to (..., Hq, L, S); ``keep`` is the chance a pair is allowed;
    ``empty_rows`` (along L) and ``dead_cols`` (along S) are masked everywhere where the
    mask has those axes; additive masks are 0 / -inf plus ``bias`` times a normal bias;
    ``expand`` broadcasts the mask (stride 0) to the full attention shape on the backend.
    ``floor`` (e.g. -1e30) is added to every pair of the ``floor_rows`` (along L): rows
    dominated by a huge finite mask value, whose lse rounds to the floor and absorbs
    log(n) (issue 25, item 6). Softmax cancels it; only float64 cases draw it, where
    every score is far below half its spacing, so every path rounds s + floor to floor.
    """

    kind: str  # "bool" | "additive"
    shape: tuple[int, ...]
    keep: float
    empty_rows: tuple[int, ...] = ()
    dead_cols: tuple[int, ...] = ()
    bias: float = 0.0
    expand: bool = False
    seed: int = 0
    floor: float = 0.0
    floor_rows: tuple[int, ...] = ()

    def floor_offset(self) -> np.ndarray:
        """The floor added to the mask (``shape``): ``floor`` on ``floor_rows``, else 0."""
        offset = np.zeros(self.shape)
        if self.floor and self.floor_rows and len(self.shape) >= 2:
            offset[..., list(self.floor_rows), :] = self.floor
        return offset

    def array(self, dtype: str) -> np.ndarray:
        rng = np.random.default_rng(self.seed)
        allowed = rng.random(self.shape) < self.keep
        if self.empty_rows and len(self.shape) >= 2:
            allowed[..., list(self.empty_rows), :] = False
        if self.dead_cols and len(self.shape) >= 1:
            allowed[..., list(self.dead_cols)] = False
        if self.kind == "bool":
            return allowed
        bias = rng.standard_normal(self.shape) * self.bias + self.floor_offset()
        return ref.round_to(np.where(allowed, bias, -np.inf), dtype)


# --- the case ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FuzzCase:
    """One drawn call. ``window_mask``: pass ``window`` as ``masks.sliding_window``."""

    q: tuple[int, ...]
    k: tuple[int, ...]
    v: tuple[int, ...]
    dtype: str
    seed: int
    magnitude: float = 1.0
    layout: str = "contiguous"  # or "transposed" (non-contiguous views)
    mask: ArrayMask | Node | None = None
    is_causal: bool = False
    causal_alignment: str = "top_left"
    window: Window = None
    window_mask: bool = False
    scale: float | None = None
    enable_gqa: bool = False
    q_offset: int = 0
    kv_offset: int = 0
    score_mod: tuple[Any, ...] | None = None  # ("softcap", cap) | ("alibi", H)
    block_size: int | None = None  # generic
    auto_block_size: int | None = None  # auto
    return_weights: bool = False
    return_lse: bool = False

    @property
    def L(self) -> int:
        return self.q[-2]

    @property
    def S(self) -> int:
        return self.k[-2]

    @property
    def groups(self) -> int:
        if self.enable_gqa and min(len(self.q), len(self.k)) >= 3 and self.k[-3] > 0:
            return self.q[-3] // self.k[-3] if self.q[-3] != self.k[-3] else 1
        return 1

    @property
    def out_lead(self) -> tuple[int, ...]:
        kl, vl = self.k[:-2], self.v[:-2]
        if self.groups > 1:
            kl, vl = (*kl[:-1], self.q[-3]), (*vl[:-1], self.q[-3])
        return tuple(np.broadcast_shapes(self.q[:-2], kl, vl))

    def kwargs(self) -> dict[str, Any]:
        """The scalar keyword arguments of the call (no mask, impl or returns)."""
        kw: dict[str, Any] = {}
        if self.is_causal:
            kw["is_causal"] = True
        if self.causal_alignment != "top_left":
            kw["causal_alignment"] = self.causal_alignment
        if self.window is not None and not self.window_mask:
            kw["window"] = self.window
        for name in ("scale", "q_offset", "kv_offset"):
            if getattr(self, name):
                kw[name] = getattr(self, name)
        if self.enable_gqa:
            kw["enable_gqa"] = True
        return kw

    def describe(self) -> str:
        mask = "none"
        if isinstance(self.mask, ArrayMask):
            m = self.mask
            mask = (
                f"{m.kind} array {m.shape} keep={m.keep} empty_rows={m.empty_rows} "
                f"dead_cols={m.dead_cols} bias={m.bias} floor={m.floor} on rows {m.floor_rows} "
                f"expand={m.expand} seed={m.seed}: "
                f"{_short(m.array(self.dtype))}"
            )
        elif isinstance(self.mask, Node):
            mask = f"structured {self.mask!r}"
        extra = {
            "window_mask": self.window_mask,
            "score_mod": self.score_mod,
            "block_size": self.block_size,
            "auto_block_size": self.auto_block_size,
            "return_weights": self.return_weights,
            "return_lse": self.return_lse,
            "magnitude": self.magnitude,
            "layout": self.layout,
            "seed": self.seed,
        }
        if self.window_mask:
            extra["window"] = self.window
        return (
            f"query {self.q}, key {self.k}, value {self.v}, dtype {self.dtype}, "
            f"kwargs {self.kwargs()}, mask {mask}, {extra}"
        )


# --- inputs and the oracle --------------------------------------------------------------


def alibi_slopes(n: int) -> np.ndarray:
    """ALiBi's geometric slopes (Press et al.): 2^(-8 (h+1) / n) for n a power of two,
    else those of the power of two below followed by every other one of the next."""

    def pow2(m: int) -> list[float]:
        return [2.0 ** (-8.0 * (h + 1) / m) for h in range(m)]

    p = 1 << (n.bit_length() - 1)
    return np.asarray(pow2(n) if p == n else pow2(p) + pow2(2 * p)[0::2][: n - p])


def score_mod_pair(spec: tuple[Any, ...] | None) -> tuple[Any, Any]:
    """(attnkit score_mod, its NumPy twin f(s, q_idx, kv_idx, head)) for a spec."""
    if spec is None:
        return None, None
    if spec[0] == "softcap":
        cap = spec[1]
        return _softcap(cap), lambda s, qi, ki, h: cap * np.tanh(s / cap)
    slopes = alibi_slopes(spec[1])
    return _alibi(spec[1]), lambda s, qi, ki, h: s + slopes[h] * (ki - qi)


@functools.lru_cache(maxsize=16)
def _softcap(cap: float) -> Any:  # one object per cap: jax.jit caches reuse it
    return ak_score_mods.softcap(cap)


@functools.lru_cache(maxsize=16)
def _alibi(n: int) -> Any:
    return ak_score_mods.alibi(n)


@dataclass
class Problem:
    """A case's float64 inputs (rounded to its dtype) and the oracle's result."""

    case: FuzzCase
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    mask: np.ndarray | None  # the ArrayMask's array (its own shape), else None
    oracle_mask: np.ndarray | None  # what oracle.attention gets (dense structure)
    oracle_kwargs: dict[str, Any]
    gold: ref.Result
    lowp: ref.Result | None
    score_max: float


def build_problem(case: FuzzCase) -> Problem:
    rng = np.random.default_rng(case.seed)
    q, k, v = (
        ref.round_to(rng.standard_normal(s) * case.magnitude, case.dtype)
        for s in (case.q, case.k, case.v)
    )
    L, S, qo, ko = case.L, case.S, case.q_offset, case.kv_offset
    mask = None
    structure = None
    if isinstance(case.mask, ArrayMask):
        mask = case.mask.array(case.dtype)
    elif isinstance(case.mask, Node):
        structure = case.mask.dense(L, S, qo, ko)
    if case.window_mask and case.window is not None:
        left, right = (case.window, case.window) if isinstance(case.window, int) else case.window
        w = Node("window", (left, right, case.causal_alignment)).dense(L, S, qo, ko)
        structure = w if structure is None else structure & w
    oracle_mask = mask
    if structure is not None:
        if mask is None:
            oracle_mask = structure
        elif mask.dtype == bool:
            oracle_mask = mask & structure
        else:
            oracle_mask = np.where(structure, mask, -np.inf)
    kw = case.kwargs()
    kw.pop("window", None)
    oracle_kwargs = {
        **kw,
        "window": None if case.window_mask else case.window,
        "score_mod": score_mod_pair(case.score_mod)[1],
    }
    gold = ref.attention(q, k, v, attn_mask=oracle_mask, **oracle_kwargs)
    lowp = None
    if case.dtype in ("float16", "bfloat16"):
        lowp = ref.attention_lowp(q, k, v, case.dtype, attn_mask=oracle_mask, **oracle_kwargs)
    smax = _score_max(case, q, k, _without_floor(case.mask, mask))
    return Problem(case, q, k, v, mask, oracle_mask, oracle_kwargs, gold, lowp, smax)


def _without_floor(spec: ArrayMask | Node | None, mask: np.ndarray | None) -> Any:
    """The mask less its row floor (softmax cancels a row's constant, so the score bound,
    and with it the tolerance, must not grow with it)."""
    if not isinstance(spec, ArrayMask) or mask is None or mask.dtype == bool:
        return mask
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(mask), mask - spec.floor_offset(), mask)


def _score_max(case: FuzzCase, q: np.ndarray, k: np.ndarray, mask: np.ndarray | None) -> float:
    """A bound on |scaled score| + |additive bias| + what a score mod adds (Cauchy-Schwarz)."""
    scale = 1.0 / math.sqrt(case.q[-1]) if case.scale is None else abs(case.scale)
    qn = float(np.max(np.linalg.norm(q, axis=-1), initial=0.0))
    kn = float(np.max(np.linalg.norm(k, axis=-1), initial=0.0))
    bias = 0.0
    if mask is not None and mask.dtype != bool:
        bias = float(np.max(np.abs(mask[np.isfinite(mask)]), initial=0.0))
    mod = 0.0
    if case.score_mod is not None and case.score_mod[0] == "alibi":
        span = case.L + case.S + case.q_offset + case.kv_offset
        mod = float(span)
    return scale * qn * kn + bias + mod


# --- who reads what: slices of the inputs behind each output slice ----------------------


def slice_ids(shape: tuple[int, ...], out_lead: tuple[int, ...], groups: int = 1) -> np.ndarray:
    """For every output slice (out_lead), the flat index of the input slice it reads.

    ``shape`` is the input's shape (..., N, X); key and value heads are repeated
    ``groups`` times for GQA (query head h reads kv head h // groups)."""
    lead = shape[:-2]
    ids = np.arange(math.prod(lead)).reshape(lead)
    if groups > 1:
        ids = np.repeat(ids, groups, axis=-1)
    return np.broadcast_to(ids, out_lead)


def dead_rows(allowed: np.ndarray, ids: np.ndarray, n_slices: int) -> np.ndarray:
    """(n_slices, S) bool: key/value row j of input slice p is read by no query."""
    attended = allowed.any(axis=-2)  # (*out_lead, S)
    dead = np.ones((n_slices, allowed.shape[-1]), bool)
    for p in range(n_slices):
        sel = ids == p
        if sel.any():
            dead[p] = ~attended[sel].any(axis=0)
    return dead


def empty_query_rows(allowed: np.ndarray, ids: np.ndarray, n_slices: int) -> np.ndarray:
    """(n_slices, L) bool: query row i of input slice p has nothing to attend anywhere."""
    empty = ~allowed.any(axis=-1)  # (*out_lead, L)
    out = np.zeros((n_slices, allowed.shape[-2]), bool)
    for p in range(n_slices):
        sel = ids == p
        if sel.any():
            out[p] = empty[sel].all(axis=0)
    return out


def key_row_readers(allowed: np.ndarray, ids: np.ndarray, p: int, j: int) -> np.ndarray:
    """(*out_lead, L) bool: the output rows allowed to attend row j of key slice p."""
    return (ids == p)[..., None] & allowed[..., :, j]
