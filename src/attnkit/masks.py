"""Structured attention masks that tell the executor which key blocks each query block needs.

A :class:`Mask` says, for query rows ``[q_lo, q_hi)``, which key columns may hold an
allowed pair (``key_ranges``: static Python ints, so whole key blocks are never touched)
and which pairs inside those columns are allowed (``tile``: a bool array built from
positions or from the mask's own arrays). Work and memory then grow with the attended
pairs, not with L x S. Every mask can be materialized to a dense bool array and reports
its density. Masks combine with ``&`` and ``|``; pass one as ``attn_mask=``.

Positions are absolute: query row i sits at ``q_offset + i (+ S - L for bottom_right)``
and key column j at ``kv_offset + j``, so masks stay right when attention is computed
piece by piece. Mask kinds (x = may attend, L = S = 6 shown)::

    causal()          sliding_window((2, 0))   documents([2, 4])     global_tokens(1)
    x . . . . .       x . . . . .              x x . . . .           x x x x x x
    x x . . . .       x x . . . .              x x . . . .           x x . . . .
    x x x . . .       x x x . . .              . . x x x x           x . x . . .
    x x x x . .       . x x x . .              . . x x x x           x . . x . .
    x x x x x .       . . x x x .              . . x x x x           x . . . x .
    x x x x x x       . . . x x x              . . x x x x           x . . . . x
                                                            (global_tokens(1) | diagonal)
"""

from __future__ import annotations

import math
import numbers
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from .errors import (
    ArgumentTypeError,
    DeviceMismatchError,
    DTypeError,
    NamespaceMismatchError,
    ParameterError,
    ShapeError,
)

__all__ = [
    "Geometry",
    "Mask",
    "Tile",
    "bigbird",
    "block_sparse",
    "causal",
    "check_position_range",
    "clip_ranges",
    "dense",
    "documents",
    "global_tokens",
    "key_padding",
    "segments",
    "sliding_window",
    "window_sides",
]

Ranges = list[tuple[int, int]]


@dataclass(slots=True)  # built on every call: a frozen dataclass costs microseconds more
class Geometry:
    """Lengths and offsets of one attention call."""

    L: int
    S: int
    q_offset: int = 0
    kv_offset: int = 0


@dataclass
class Tile:
    """Query rows [q_lo, q_hi) against the key columns in ``ranges`` (local indices)."""

    xp: Any
    device: Any
    geometry: Geometry
    q_lo: int
    q_hi: int
    ranges: Ranges

    @cached_property
    def q_index(self) -> Any:  # (Bq, 1) local row indices
        return self.xp.arange(self.q_lo, self.q_hi, device=self.device)[:, None]

    @cached_property
    def k_index(self) -> Any:  # (1, Sk) local column indices of the selected ranges
        xp = self.xp
        parts = [xp.arange(lo, hi, device=self.device) for lo, hi in self.ranges]
        return (parts[0] if len(parts) == 1 else xp.concat(parts))[None, :]

    def q_pos(self, alignment: str = "top_left") -> Any:
        g = self.geometry
        shift = g.S - g.L if alignment == "bottom_right" else 0
        return self.q_index + (g.q_offset + shift)

    @cached_property
    def k_pos(self) -> Any:
        return self.k_index + self.geometry.kv_offset

    def columns(self, x: Any) -> Any:
        """The selected columns of x's last axis (x itself where that axis is 1)."""
        if x.shape[-1] == 1:
            return x
        parts = [x[..., lo:hi] for lo, hi in self.ranges]
        return parts[0] if len(parts) == 1 else self.xp.concat(parts, axis=-1)

    def rows(self, x: Any) -> Any:
        """Rows [q_lo, q_hi) of x's second-to-last axis (x itself where that axis is 1)."""
        return x if x.shape[-2] == 1 else x[..., self.q_lo : self.q_hi, :]


def _and(a: Any, b: Any) -> Any:
    return b if a is None else (a if b is None else a & b)


def _merge(ranges: Ranges) -> Ranges:
    """Sorted, non-empty, non-overlapping, adjacent ranges joined."""
    out: Ranges = []
    for lo, hi in sorted(r for r in ranges if r[1] > r[0]):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def clip_ranges(ranges: Ranges, S: int) -> Ranges:
    return _merge([(max(0, lo), min(S, hi)) for lo, hi in ranges])


def _prod(shape: tuple[int, ...]) -> int:
    out = 1
    for n in shape:
        out *= n
    return out


def _intersect(a: Ranges, b: Ranges) -> Ranges:
    out = [(max(l1, l2), min(h1, h2)) for l1, h1 in a for l2, h2 in b]
    return _merge(out)


class Mask:
    """Base class: a bool relation between query and key positions (True = may attend)."""

    #: Leading dims the mask carries beyond (L, S), e.g. (B, 1) for per-batch padding.
    lead: tuple[int, ...] = ()
    #: True when a tile depends only on key position minus query position (windows,
    #: causal): the executor then reuses one tile for every block with the same shape.
    translation_invariant: bool = False

    def key_ranges(self, g: Geometry, q_lo: int, q_hi: int) -> Ranges:
        """Key columns [lo, hi) that rows [q_lo, q_hi) may attend (a superset is fine)."""
        return [(0, g.S)]

    def tile(self, t: Tile) -> Any:
        """Bool (..., Bq, Sk) for the tile, or None when every pair in it is allowed."""
        raise NotImplementedError

    def key_alive(self, xp: Any, device: Any, g: Geometry) -> Any:
        """Bool (..., 1, S): False on key columns no query may ever attend (padding); None
        if the mask has no such columns to declare."""
        return None

    def check(self, xp: Any, device: Any, g: Geometry, name: str) -> None:
        """Raise an attnkit error, before any work, where this mask cannot describe a call
        of geometry ``g`` on arrays of namespace ``xp`` and ``device`` (passed as the
        argument ``name``): arrays of another library or device, shapes that do not fit
        L or S, lengths beyond the keys, positions the mask does not define."""
        check_position_range(xp, device, g, name, self)

    def materialize(
        self, xp: Any, L: int, S: int, *, device: Any = None, q_offset: int = 0, kv_offset: int = 0
    ) -> Any:
        """The dense bool mask (..., L, S) (leading dims as the mask carries them)."""
        t = Tile(xp, device, Geometry(L, S, q_offset, kv_offset), 0, L, [(0, S)])
        allowed = self.tile(t) if L and S else None
        if allowed is None:
            return xp.ones((*self.lead, L, S), dtype=xp.bool, device=device)
        return xp.broadcast_to(allowed, (*self.lead, L, S))

    def density(
        self, xp: Any, L: int, S: int, *, device: Any = None, q_offset: int = 0, kv_offset: int = 0
    ) -> float:
        """Fraction of allowed (query, key) pairs, averaged over the mask's leading dims.

        Counted tile by tile over the key ranges, so memory stays O(rows x S)."""
        if L == 0 or S == 0:
            return 0.0
        g = Geometry(L, S, q_offset, kv_offset)
        rows = max(1, 2**22 // max(S, 1))
        allowed = 0.0
        for q_lo in range(0, L, rows):
            q_hi = min(L, q_lo + rows)
            ranges = clip_ranges(self.key_ranges(g, q_lo, q_hi), S)
            if not ranges:
                continue
            tile = self.tile(Tile(xp, device, g, q_lo, q_hi, ranges))
            width = sum(hi - lo for lo, hi in ranges)
            if tile is None:
                allowed += (q_hi - q_lo) * width
            else:
                full = xp.broadcast_to(tile, (*self.lead, q_hi - q_lo, width))
                allowed += float(xp.count_nonzero(full)) / max(1, _prod(self.lead))
        return allowed / (L * S)

    def __and__(self, other: Mask) -> Mask:
        return _Combined("and", (self, _check_mask(other)))

    def __or__(self, other: Mask) -> Mask:
        return _Combined("or", (self, _check_mask(other)))


def _check_mask(other: Any) -> Mask:
    if not isinstance(other, Mask):
        raise ArgumentTypeError(
            f"masks combine with other attnkit.masks objects, got {type(other).__name__}; wrap "
            "a bool array with attnkit.masks.dense(array)."
        )
    return other


def check_position_range(xp: Any, device: Any, g: Geometry, name: str, mask: Any) -> None:
    """Refuse absolute positions that the namespace's index dtype cannot hold (JAX without
    64-bit mode indexes in int32): the mask would compare wrapped-around positions."""
    largest = max(abs(g.q_offset) + g.L + abs(g.S - g.L), abs(g.kv_offset) + g.S)
    if largest < 2**31:
        return
    dtype = xp.arange(1, device=device).dtype
    if xp.iinfo(dtype).max >= largest:
        return
    raise ParameterError(
        f"{name} {mask!r} sees absolute positions up to {largest} (q_offset={g.q_offset}, "
        f"kv_offset={g.kv_offset}), beyond this array library's {dtype} indices; enable 64-bit "
        "mode (jax.config.update('jax_enable_x64', True)) or pass smaller offsets."
    )


def _check_no_negative(g: Geometry, name: str, mask: Mask) -> None:
    """Structures laid out from position 0 define no negative positions."""
    if g.q_offset < 0 or g.kv_offset < 0:
        raise ParameterError(
            f"{name} {mask!r} is laid out from position 0 and defines no negative positions, "
            f"got q_offset={g.q_offset} and kv_offset={g.kv_offset}; pass offsets >= 0 (the "
            "absolute positions of the first query and key in the laid-out sequence)."
        )


def _check_array(xp: Any, device: Any, x: Any, what: str) -> None:
    """``x`` (an array a mask carries) must share the inputs' library and device."""
    import array_api_compat as aac

    if aac.array_namespace(x) is not xp:
        raise NamespaceMismatchError(
            f"{what} is a {type(x).__module__}.{type(x).__name__} but the query comes from "
            f"{getattr(xp, '__name__', xp)}; build the mask from arrays of the query's library "
            "(convert it first, e.g. torch.as_tensor(array) or jax.numpy.asarray(array))."
        )
    other = aac.device(x)
    if device is not None and other is not None and other != device:
        raise DeviceMismatchError(
            f"{what} is on device {other} but the query is on {device}; move it to the "
            "query's device."
        )


def _array_or_raise(x: Any, what: str) -> Any:
    import array_api_compat as aac

    if not aac.is_array_api_obj(x):
        raise ArgumentTypeError(
            f"{what} must be an array (NumPy, PyTorch, JAX or any array-API array), got "
            f"{type(x).__name__}; convert it first, e.g. numpy.asarray(...)."
        )
    return aac.array_namespace(x)


def _broadcast_lead(*leads: tuple[int, ...]) -> tuple[int, ...]:
    from .shapes import broadcast_shapes

    lead = broadcast_shapes(*leads)
    if lead is None:
        raise ParameterError(f"combined masks carry leading dims that do not broadcast: {leads}.")
    return lead


@dataclass(frozen=True)
class _Combined(Mask):
    op: str
    parts: tuple[Mask, ...]

    def __post_init__(self) -> None:
        flat: list[Mask] = []
        for part in self.parts:  # (a & b) & c -> and(a, b, c)
            flat.extend(
                part.parts if isinstance(part, _Combined) and part.op == self.op else [part]
            )
        object.__setattr__(self, "parts", tuple(flat))

    @property
    def lead(self) -> tuple[int, ...]:  # type: ignore[override]
        return _broadcast_lead(*(p.lead for p in self.parts))

    @property
    def translation_invariant(self) -> bool:  # type: ignore[override]
        return all(p.translation_invariant for p in self.parts)

    def key_ranges(self, g: Geometry, q_lo: int, q_hi: int) -> Ranges:
        ranges = [p.key_ranges(g, q_lo, q_hi) for p in self.parts]
        if self.op == "or":
            return _merge([r for rs in ranges for r in rs])
        out = ranges[0]
        for r in ranges[1:]:
            out = _intersect(out, r)
        return out

    def key_alive(self, xp: Any, device: Any, g: Geometry) -> Any:
        alive = [p.key_alive(xp, device, g) for p in self.parts]
        if self.op == "or" and any(a is None for a in alive):
            return None  # a part that declares nothing may attend any column
        out = None
        for a in alive:
            if a is not None:
                out = a if out is None else (out & a if self.op == "and" else out | a)
        return out

    def check(self, xp: Any, device: Any, g: Geometry, name: str) -> None:
        for part in self.parts:
            part.check(xp, device, g, name)

    def tile(self, t: Tile) -> Any:
        tiles = [p.tile(t) for p in self.parts]
        if self.op == "and":
            out = None
            for x in tiles:
                out = _and(out, x)
            return out
        if any(x is None for x in tiles):
            return None
        out = tiles[0]
        for x in tiles[1:]:
            out = out | x
        return out

    def __repr__(self) -> str:
        return f" {'&' if self.op == 'and' else '|'} ".join(f"({p!r})" for p in self.parts)


def _shift(g: Geometry, alignment: str) -> int:
    return g.S - g.L if alignment == "bottom_right" else 0


def _check_alignment(alignment: str) -> str:
    if alignment not in ("top_left", "bottom_right"):
        raise ParameterError(f"alignment must be 'top_left' or 'bottom_right', got {alignment!r}.")
    return alignment


@dataclass(frozen=True)
class _Window(Mask):
    """qpos - left <= kpos <= qpos + right (None = unbounded side); causal is (None, 0)."""

    left: int | None
    right: int | None
    alignment: str = "top_left"
    translation_invariant = True  # a class attribute, not a field

    def key_ranges(self, g: Geometry, q_lo: int, q_hi: int) -> Ranges:
        q_min = g.q_offset + _shift(g, self.alignment) + q_lo
        q_max = q_min + (q_hi - q_lo) - 1
        lo = 0 if self.left is None else max(0, q_min - self.left - g.kv_offset)
        hi = g.S if self.right is None else min(g.S, q_max + self.right - g.kv_offset + 1)
        return [(lo, hi)] if hi > lo else []

    def tile(self, t: Tile) -> Any:
        g = t.geometry
        q_min = g.q_offset + _shift(g, self.alignment) + t.q_lo
        q_max = q_min + (t.q_hi - t.q_lo) - 1
        k_min = g.kv_offset + t.ranges[0][0]
        k_max = g.kv_offset + t.ranges[-1][1] - 1
        need_left = self.left is not None and k_min < q_max - self.left
        need_right = self.right is not None and k_max > q_min + self.right
        if not (need_left or need_right):
            return None
        # kpos - qpos = (k_index - q_index) + c with c a Python int: local indices stay
        # small, so huge offsets never overflow a 32-bit index (JAX without x64)
        c = g.kv_offset - (g.q_offset + _shift(g, self.alignment))
        qi, kj = t.q_index, t.k_index  # (Bq, 1), (1, Sk) local indices
        out = None
        if need_left:  # kpos >= qpos - left
            out = kj >= qi + _clamp(-self.left - c)
        if need_right:  # kpos <= qpos + right
            out = _and(out, kj <= qi + _clamp(self.right - c))
        return out

    def check(self, xp: Any, device: Any, g: Geometry, name: str) -> None:
        return None  # relative positions only: any offset works


def _clamp(bound: int) -> int:
    """A bound on a difference of local indices (each below 2**30) clamped to +-2**30: the
    comparison's result is unchanged and q_index + bound fits a 32-bit index."""
    return max(-(2**30), min(2**30, bound))


def causal(alignment: str = "top_left") -> Mask:
    """Key position <= query position (``bottom_right``: the last query sees the last key)."""
    return _Window(None, 0, _check_alignment(alignment))


def _is_int(value: Any) -> bool:
    return type(value) is int or (
        isinstance(value, numbers.Integral) and not isinstance(value, bool)
    )


def window_sides(window: Any) -> tuple[int | None, int | None]:
    """``(left, right)`` from an int W (meaning (W, W)) or a pair; None = unbounded side."""
    sides = (window, window) if _is_int(window) else window
    if not (isinstance(sides, tuple | list) and len(sides) == 2):
        raise ParameterError(
            f"window must be None, an int W (meaning (W, W)) or a pair (left, right), got "
            f"{window!r}; query i then sees keys i-left .. i+right."
        )
    for side_name, side in zip(("left", "right"), sides, strict=True):
        if side is not None and (not _is_int(side) or side < 0):
            raise ParameterError(
                f"window {side_name} side must be a non-negative int or None (unbounded), got "
                f"{side!r} in window={window!r}; for FlashAttention's -1 pass None."
            )
    return (
        None if sides[0] is None else int(sides[0]),
        None if sides[1] is None else int(sides[1]),
    )


def sliding_window(
    window: int | tuple[int | None, int | None], alignment: str = "top_left"
) -> Mask:
    """Query i sees keys i-left .. i+right; an int W means (W, W); None = unbounded side.

    ``sliding_window((W, 0))`` is a causal window of W previous keys plus the current one.
    """
    left, right = window_sides(window)
    return _Window(left, right, _check_alignment(alignment))


@dataclass(frozen=True)
class _GlobalTokens(Mask):
    n: int

    def key_ranges(self, g: Geometry, q_lo: int, q_hi: int) -> Ranges:
        if g.q_offset + q_lo < self.n:  # a global query row sees every key
            return [(0, g.S)]
        return [(0, min(g.S, max(0, self.n - g.kv_offset)))]

    def tile(self, t: Tile) -> Any:
        return (t.q_pos() < self.n) | (t.k_pos < self.n)


def global_tokens(n: int) -> Mask:
    """The first ``n`` positions attend everywhere and are attended by every query
    (Longformer's global attention); combine with a window by ``|``."""
    if not _is_int(n) or n < 0:
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
        _check_no_negative(g, name, self)
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
    lengths = _int_lengths(lengths, "documents")
    if not lengths or any(n <= 0 for n in lengths):
        raise ParameterError(
            f"documents needs a non-empty sequence of positive int lengths, got {lengths!r}."
        )
    starts = [0]
    for n in lengths[:-1]:
        starts.append(starts[-1] + n)
    return _Documents(tuple(starts), sum(lengths))


def _int_lengths(lengths: Any, what: str) -> list[int]:
    """A sequence of Python ints (or an array's ``tolist()``), refusing fractions and bools."""
    values = lengths.tolist() if hasattr(lengths, "tolist") else lengths
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise ArgumentTypeError(
            f"{what} needs a sequence of int lengths, got {type(lengths).__name__} {lengths!r}."
        )
    if not all(_is_int(n) for n in values):
        raise ParameterError(f"{what} lengths must be ints, got {list(values)!r}.")
    return [int(n) for n in values]


@dataclass(frozen=True, eq=False)
class _KeyPadding(Mask):
    lengths: Any  # tuple of ints (static) or an integer array (B,)
    lead: tuple[int, ...] = ()

    def key_ranges(self, g: Geometry, q_lo: int, q_hi: int) -> Ranges:
        if isinstance(self.lengths, tuple):
            hi = min(g.S, max(self.lengths) - g.kv_offset)
            return [(0, hi)] if hi > 0 else []
        return [(0, g.S)]

    def tile(self, t: Tile) -> Any:
        xp = t.xp
        lengths = self.lengths
        if isinstance(lengths, tuple):
            lengths = xp.asarray(lengths, device=t.device)
        return t.k_pos < xp.reshape(lengths, (-1, 1, 1, 1))  # (B, 1, 1, Sk)

    def key_alive(self, xp: Any, device: Any, g: Geometry) -> Any:
        t = Tile(xp, device, g, 0, 1, [(0, g.S)])
        return self.tile(t) if g.S else None  # (B, 1, 1, S)

    def check(self, xp: Any, device: Any, g: Geometry, name: str) -> None:
        super().check(xp, device, g, name)
        if isinstance(self.lengths, tuple):
            if self.lengths and max(self.lengths) > g.kv_offset + g.S:
                raise ParameterError(
                    f"{name} {self!r} has lengths {list(self.lengths)} but the keys end at "
                    f"position kv_offset + S = {g.kv_offset + g.S}; each length counts valid "
                    "keys, at most the keys there are (clip them to kv_offset + S when "
                    "attention is computed piece by piece)."
                )
            return
        _check_array(xp, device, self.lengths, f"{name} (masks.key_padding lengths)")

    def __repr__(self) -> str:
        if isinstance(self.lengths, tuple):
            return f"masks.key_padding({list(self.lengths)})"
        return f"masks.key_padding(<array {tuple(self.lengths.shape)}>)"


def key_padding(lengths: Any) -> Mask:
    """Batch b attends only key positions < lengths[b]. ``lengths``: Python ints (keys past
    the longest are never touched) or an integer array (B,) (traceable, no skipping).
    The mask carries leading dims (B, 1): it broadcasts over heads."""
    if isinstance(lengths, Sequence) and not isinstance(lengths, str):
        lengths = tuple(_int_lengths(lengths, "key_padding"))
        if not lengths or any(n < 0 for n in lengths):
            raise ParameterError(
                f"key_padding needs one length >= 0 per batch entry, got {list(lengths)!r}."
            )
        return _KeyPadding(lengths, (len(lengths), 1))
    xp = _array_or_raise(lengths, "key_padding lengths")
    if lengths.ndim != 1:
        raise ShapeError(
            f"key_padding needs lengths of shape (B,), got shape {tuple(lengths.shape)}; pass "
            "one length per batch entry."
        )
    if not xp.isdtype(lengths.dtype, "integral"):
        raise DTypeError(
            f"key_padding lengths must be integers, got dtype {lengths.dtype}; cast them, e.g. "
            "lengths.astype(int32)."
        )
    return _KeyPadding(lengths, (lengths.shape[0], 1))


@dataclass(frozen=True, eq=False)
class _Segments(Mask):
    q_ids: Any  # (..., L)
    kv_ids: Any  # (..., S)
    lead: tuple[int, ...] = field(default=())

    def tile(self, t: Tile) -> Any:
        q = self.q_ids[..., t.q_lo : t.q_hi][..., :, None]  # (..., Bq, 1)
        k = t.columns(self.kv_ids[..., None, :])  # (..., 1, Sk)
        return q == k

    def check(self, xp: Any, device: Any, g: Geometry, name: str) -> None:
        for ids, n, axis in ((self.q_ids, g.L, "L"), (self.kv_ids, g.S, "S")):
            what = f"{name} (masks.segments {'q_ids' if axis == 'L' else 'kv_ids'})"
            _check_array(xp, device, ids, what)
            if ids.shape[-1] != n:
                raise ShapeError(
                    f"{what} has {ids.shape[-1]} ids on its last axis but the call has "
                    f"{axis} = {n} {'queries' if axis == 'L' else 'keys'}: ids "
                    f"{tuple(ids.shape)}; pass one id per position (..., {axis})."
                )

    def __repr__(self) -> str:
        return f"masks.segments(<ids {tuple(self.q_ids.shape)}>, <ids {tuple(self.kv_ids.shape)}>)"


def segments(q_ids: Any, kv_ids: Any | None = None) -> Mask:
    """Query i attends key j only where q_ids[..., i] == kv_ids[..., j] (document ids of
    packed sequences, as arrays (..., L) and (..., S)); traceable, no block skipping (use
    :func:`documents` with static lengths for that). The ids' leading dims are kept,
    with a head axis of 1 added: ids (B, L) give a mask (B, 1, L, S)."""
    kv_ids = q_ids if kv_ids is None else kv_ids
    for what, ids in (("q_ids", q_ids), ("kv_ids", kv_ids)):
        xp = _array_or_raise(ids, f"segments {what}")
        if ids.ndim < 1:
            raise ShapeError(f"segments {what} must have shape (..., length), got a scalar.")
        if not (xp.isdtype(ids.dtype, "integral") or ids.dtype == xp.bool):
            raise DTypeError(
                f"segments {what} must be integer ids, got dtype {ids.dtype}; cast them, e.g. "
                "ids.astype(int32)."
            )
    from .shapes import broadcast_shapes

    if broadcast_shapes(tuple(q_ids.shape[:-1]), tuple(kv_ids.shape[:-1])) is None:
        raise ShapeError(
            f"segments q_ids {tuple(q_ids.shape)} and kv_ids {tuple(kv_ids.shape)} have leading "
            "dims that do not broadcast; give them the same batch dims (..., L) and (..., S)."
        )
    lead = (*tuple(q_ids.shape[:-1]), 1) if q_ids.ndim > 1 else ()
    q = q_ids[..., None, :] if q_ids.ndim > 1 else q_ids  # (B, 1, L): a head axis
    k = kv_ids[..., None, :] if kv_ids.ndim > 1 else kv_ids
    return _Segments(q, k, lead)


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
        return _merge(ranges)

    def check(self, xp: Any, device: Any, g: Geometry, name: str) -> None:
        _check_no_negative(g, name, self)
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
    block = (block_size, block_size) if _is_int(block_size) else block_size
    if (
        not isinstance(block, tuple | list)
        or len(block) != 2
        or any(not _is_int(b) or b <= 0 for b in block)
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
        if not _is_int(value) or value < least:
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


@dataclass(frozen=True, eq=False)
class _Dense(Mask):
    array: Any  # bool (..., L|1, S|1)
    lead: tuple[int, ...] = ()

    def tile(self, t: Tile) -> Any:
        return t.columns(t.rows(self.array))

    def check(self, xp: Any, device: Any, g: Geometry, name: str) -> None:
        what = f"{name} (masks.dense)"
        _check_array(xp, device, self.array, what)
        rows, cols = self.array.shape[-2:]
        if rows not in (1, g.L) or cols not in (1, g.S):
            raise ShapeError(
                f"{what} has shape {tuple(self.array.shape)}, whose last two axes do not "
                f"broadcast to (L, S) = {(g.L, g.S)}; each must equal the call's or be 1."
            )

    def __repr__(self) -> str:
        return f"masks.dense(<bool {tuple(self.array.shape)}>)"


def dense(array: Any) -> Mask:
    """Any bool array (True = may attend) broadcastable to (..., L, S), as a Mask.

    A float additive mask (0 / -inf) is not a Mask: pass it as ``attn_mask`` directly."""
    xp = _array_or_raise(array, "masks.dense array")
    if array.dtype != xp.bool:
        raise DTypeError(
            f"masks.dense takes a bool array (True = may attend), got dtype {array.dtype}; "
            "pass a float additive mask (0 / -inf) directly as attn_mask, or a 0/1 mask as "
            "masks.dense(array != 0)."
        )
    if array.ndim < 2:
        array = xp.reshape(array, (1,) * (2 - array.ndim) + tuple(array.shape))
    return _Dense(array, tuple(array.shape[:-2]))
