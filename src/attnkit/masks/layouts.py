"""Masks laid out from absolute position 0 by static Python ints: global tokens, packed
documents given by their lengths, arbitrary block layouts and BigBird's. Their key ranges
skip whole key blocks; positions before 0 are not defined (offsets must be >= 0) except
for global tokens."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..checks import is_int
from ..errors import ParameterError
from .algebra import Mask
from .geometry import EMPTY, FULL, PARTIAL, Geometry, Ranges, Tile, merge_ranges
from .validation import check_no_negative, int_lengths

__all__ = ["bigbird", "block_sparse", "documents", "global_tokens"]


@dataclass(frozen=True)
class _GlobalTokens(Mask):
    n: int

    def key_ranges(self, g: Geometry, q_lo: int, q_hi: int) -> Ranges:
        if g.q_offset + q_lo < self.n:  # a global query row sees every key
            return [(0, g.S)]
        return [(0, min(g.S, max(0, self.n - g.kv_offset)))]

    def tile_kind(self, g: Geometry, q_lo: int, q_hi: int, k_lo: int, k_hi: int) -> int:
        q_min, q_max = g.q_offset + q_lo, g.q_offset + q_hi - 1
        k_min, k_max = g.kv_offset + k_lo, g.kv_offset + k_hi - 1
        if q_max < self.n or k_max < self.n:
            return FULL  # every row global, or every column
        return PARTIAL if (q_min < self.n or k_min < self.n) else EMPTY

    def tile(self, t: Tile) -> Any:
        return (t.q_pos() < self.n) | (t.k_pos < self.n)


def global_tokens(n: int) -> Mask:
    """The first ``n`` positions attend everywhere and are attended by every query
    (Longformer's global attention); combine with a window by ``|``."""
    if not is_int(n) or n < 0:
        raise ParameterError(f"global_tokens needs a non-negative int count n, got {n!r}.")
    return _GlobalTokens(int(n))


@dataclass(frozen=True)
class _Documents(Mask):
    starts: tuple[int, ...]  # absolute start position of each document, increasing
    total: int = 0  # the sum of the lengths: positions [0, total) are laid out

    def __repr__(self) -> str:
        ends = [*self.starts[1:], self.total]
        return f"masks.documents({[b - a for a, b in zip(self.starts, ends, strict=True)]})"

    def check(self, xp: Any, device: Any, g: Geometry, name: str) -> None:
        check_no_negative(g, name, self)
        super().check(xp, device, g, name)
        q_end, k_end = g.q_offset + g.L, g.kv_offset + g.S
        whole = g.q_offset == 0 and g.kv_offset == 0
        if max(q_end, k_end) > self.total or (whole and self.total != max(g.L, g.S)):
            raise ParameterError(
                f"{name} {self!r}: the document lengths sum to {self.total} positions but the "
                f"call covers queries [{g.q_offset}, {q_end}) and keys [{g.kv_offset}, "
                f"{k_end}); the lengths must sum to the sequence length ({max(g.L, g.S)} "
                "here), or cover q_offset + L and kv_offset + S when computed piece by piece."
            )

    def _doc_bounds(self, pos: int) -> tuple[int, int]:
        index = (
            max(i for i, s in enumerate(self.starts) if s <= pos) if pos >= self.starts[0] else 0
        )
        end = self.starts[index + 1] if index + 1 < len(self.starts) else math.inf
        return self.starts[index], end

    def key_ranges(self, g: Geometry, q_lo: int, q_hi: int) -> Ranges:
        lo, _ = self._doc_bounds(g.q_offset + q_lo)
        _, hi = self._doc_bounds(g.q_offset + q_hi - 1)
        lo, hi = lo - g.kv_offset, (g.S if hi == math.inf else hi - g.kv_offset)
        lo, hi = max(0, lo), min(g.S, hi)
        return [(lo, hi)] if hi > lo else []

    def tile_kind(self, g: Geometry, q_lo: int, q_hi: int, k_lo: int, k_hi: int) -> int:
        first_q, last_q = (self._doc(g.q_offset + q) for q in (q_lo, q_hi - 1))
        first_k, last_k = (self._doc(g.kv_offset + k) for k in (k_lo, k_hi - 1))
        if last_q < first_k or last_k < first_q:
            return EMPTY
        return FULL if first_q == last_q == first_k == last_k else PARTIAL

    def _doc(self, pos: int) -> int:
        """The index of the document holding absolute position ``pos`` (as :meth:`_ids`)."""
        return sum(1 for s in self.starts[1:] if pos >= s)

    def _ids(self, t: Tile, pos: Any) -> Any:
        xp = t.xp
        starts = xp.asarray(self.starts[1:], device=t.device) if len(self.starts) > 1 else None
        if starts is None:
            return xp.zeros_like(pos)
        return xp.sum(xp.astype(pos[..., None] >= starts, pos.dtype), axis=-1)

    def tile(self, t: Tile) -> Any:
        return self._ids(t, t.q_pos()) == self._ids(t, t.k_pos)


def documents(lengths: Sequence[int]) -> Mask:
    """Packed variable-length sequences given by their (static) lengths: a query attends
    only keys of its own document. Combine with ``causal()`` for packed decoders."""
    if hasattr(lengths, "shape") and hasattr(lengths, "dtype"):  # an array: read it now
        try:
            lengths = lengths.tolist()
        except Exception as e:  # traced (jax.jit): no value to lay the documents out by
            raise ParameterError(
                f"masks.documents takes the documents' lengths as static ints, read when the "
                f"mask is built (its key blocks are skipped by them), got a traced array of "
                f"shape {tuple(lengths.shape)} ({type(e).__name__}); for document ids known "
                "only at run time use masks.segments(q_ids, kv_ids) with one id per position "
                "(it skips other documents' tiles at run time, under jax.jit too), or pass "
                "the lengths as Python ints."
            ) from None
    lengths = int_lengths(lengths, "documents")
    if not lengths or any(n <= 0 for n in lengths):
        raise ParameterError(
            f"documents needs a non-empty sequence of positive int lengths, got {lengths!r}; "
            "for one document id per position use masks.segments(q_ids, kv_ids)."
        )
    starts = [0]
    for n in lengths[:-1]:
        starts.append(starts[-1] + n)
    return _Documents(tuple(starts), sum(lengths))


@dataclass(frozen=True)
class _BlockSparse(Mask):
    layout: tuple[tuple[bool, ...], ...]  # (query blocks, key blocks)
    block: tuple[int, int]

    def _row_blocks(self, g: Geometry, q_lo: int, q_hi: int) -> range:
        bq = self.block[0]
        first, last = (g.q_offset + q_lo) // bq, (g.q_offset + q_hi - 1) // bq
        return range(max(first, 0), min(last, len(self.layout) - 1) + 1)

    def key_ranges(self, g: Geometry, q_lo: int, q_hi: int) -> Ranges:
        bk = self.block[1]
        ranges = []
        for r in self._row_blocks(g, q_lo, q_hi):
            for c, on in enumerate(self.layout[r]):
                if on:
                    ranges.append(
                        (max(0, c * bk - g.kv_offset), min(g.S, (c + 1) * bk - g.kv_offset))
                    )
        return merge_ranges(ranges)

    def tile_kind(self, g: Geometry, q_lo: int, q_hi: int, k_lo: int, k_hi: int) -> int:
        (bq, bk), nq, nk = self.block, len(self.layout), len(self.layout[0])
        q_min, q_max = g.q_offset + q_lo, g.q_offset + q_hi - 1
        k_min, k_max = g.kv_offset + k_lo, g.kv_offset + k_hi - 1
        rows = range(max(0, q_min // bq), min(nq - 1, q_max // bq) + 1)
        cols = range(max(0, k_min // bk), min(nk - 1, k_max // bk) + 1)
        cells = [self.layout[r][c] for r in rows for c in cols]
        if not any(cells):
            return EMPTY
        inside = q_min >= 0 and k_min >= 0 and q_max < nq * bq and k_max < nk * bk
        return FULL if inside and all(cells) else PARTIAL

    def check(self, xp: Any, device: Any, g: Geometry, name: str) -> None:
        check_no_negative(g, name, self)
        super().check(xp, device, g, name)

    def __repr__(self) -> str:
        nq, nk = len(self.layout), len(self.layout[0])
        return f"masks.block_sparse(<layout {nq} x {nk}>, block_size={self.block})"

    def tile(self, t: Tile) -> Any:
        xp = t.xp
        nq, nk = len(self.layout), len(self.layout[0])
        flat = xp.asarray([v for row in self.layout for v in row], dtype=xp.bool, device=t.device)
        qb = xp.clip(t.q_pos() // self.block[0], 0, nq - 1)  # (Bq, 1)
        kb = xp.clip(t.k_pos // self.block[1], 0, nk - 1)  # (1, Sk)
        inside = (t.q_pos() < nq * self.block[0]) & (t.k_pos < nk * self.block[1])
        picked = xp.take(flat, xp.reshape(qb * nk + kb, (-1,)), axis=0)  # (Bq * Sk,)
        return xp.reshape(picked, inside.shape) & inside  # (Bq, Sk)


def block_sparse(layout: Any, block_size: int | tuple[int, int]) -> Mask:
    """An arbitrary block layout: ``layout[r][c]`` True lets query block r attend key block
    c, blocks of ``block_size`` (or (Bq, Bk)) positions; positions past the layout are
    masked. ``layout``: nested sequences of bools or any array with ``tolist()``."""
    rows = layout.tolist() if hasattr(layout, "tolist") else layout
    table = tuple(tuple(bool(v) for v in row) for row in rows)
    if not table or not table[0] or any(len(row) != len(table[0]) for row in table):
        raise ParameterError(
            "block_sparse needs a non-empty rectangular layout (query blocks x key blocks)."
        )
    block = (block_size, block_size) if is_int(block_size) else block_size
    if (
        not isinstance(block, tuple | list)
        or len(block) != 2
        or any(not is_int(b) or b <= 0 for b in block)
    ):
        raise ParameterError(
            f"block_sparse block_size must be a positive int or a pair (Bq, Bk) of them, got "
            f"{block_size!r}."
        )
    block = (int(block[0]), int(block[1]))
    return _BlockSparse(table, block)  # type: ignore[arg-type]


def bigbird(
    L: int,
    S: int | None = None,
    *,
    block_size: int = 64,
    window_blocks: int = 3,
    global_blocks: int = 1,
    random_blocks: int = 2,
    seed: int = 0,
) -> Mask:
    """BigBird (Zaheer et al. 2020) as a block layout: a band of ``window_blocks`` blocks,
    the first ``global_blocks`` blocks global both ways, and ``random_blocks`` random key
    blocks per query block drawn from ``random.Random(seed)`` (the same on every backend)."""
    S = L if S is None else S
    for what, value, least in (
        ("L", L, 1),
        ("S", S, 1),
        ("block_size", block_size, 1),
        ("window_blocks", window_blocks, 1),
        ("global_blocks", global_blocks, 0),
        ("random_blocks", random_blocks, 0),
    ):
        if not is_int(value) or value < least:
            raise ParameterError(f"bigbird {what} must be an int >= {least}, got {value!r}.")
    nq, nk = -(-L // block_size), -(-S // block_size)
    rng = random.Random(seed)
    layout = [[False] * nk for _ in range(nq)]
    half = window_blocks // 2
    for r in range(nq):
        for c in range(max(0, r - half), min(nk, r + half + 1)):
            layout[r][c] = True
        for c in range(min(global_blocks, nk)):
            layout[r][c] = True
        if r < global_blocks:
            layout[r] = [True] * nk
        for c in rng.sample(range(nk), min(random_blocks, nk)):
            layout[r][c] = True
    return block_sparse(layout, block_size)
