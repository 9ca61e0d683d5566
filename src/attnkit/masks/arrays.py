"""Masks carried by the caller's data: key padding by lengths, segment ids, and any dense
bool array. Their arrays must share the query's library and device (checked per call);
their leading dims broadcast over the inputs' (..., Hq)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from array_api_compat import device as array_device

from ..errors import DTypeError, ParameterError, ShapeError
from ..shapes import broadcast_shapes
from .algebra import Mask
from .geometry import EMPTY, FULL, PARTIAL, Geometry, Ranges, Tile
from .validation import array_namespace_of, check_same_library, int_lengths

__all__ = ["dense", "key_padding", "segments", "tile_any"]


def tile_any(xp: Any, x: Any, rows: int, cols: int) -> Any:
    """Bool (n_q|1, n_k|1): whether any element of the bool ``x`` (..., L|1, S|1) is
    True in each tile of ``rows`` x ``cols`` (over every leading slice), n_q = ceil(L /
    rows), n_k = ceil(S / cols); an axis of 1 stays 1."""
    if x.ndim > 2:  # any over the leading dims first: (L|1, S|1)
        x = xp.any(x, axis=tuple(range(x.ndim - 2)))
    R, C = x.shape
    if R != 1:
        n_q = -(-R // rows)
        if n_q * rows != R:  # rows past L hold no pair
            pad = xp.zeros((n_q * rows - R, C), dtype=xp.bool, device=array_device(x))
            x = xp.concat([x, pad], axis=0)
        x = xp.any(xp.reshape(x, (n_q, rows, C)), axis=1)  # (n_q, C)
    if C != 1:
        n_k = -(-C // cols)
        R2 = x.shape[0]
        if n_k * cols != C:
            pad = xp.zeros((R2, n_k * cols - C), dtype=xp.bool, device=array_device(x))
            x = xp.concat([x, pad], axis=1)
        x = xp.any(xp.reshape(x, (R2, n_k, cols)), axis=2)  # (n_q|1, n_k)
    return x


@dataclass(frozen=True, eq=False)
class _KeyPadding(Mask):
    lengths: Any  # tuple of ints (static) or an integer array (B,)
    lead: tuple[int, ...] = ()
    keys_only = True  # a class attribute, not a field

    @property
    def holds_data(self) -> bool:  # type: ignore[override]
        return not isinstance(self.lengths, tuple)

    @property
    def arrays_held(self) -> int:  # type: ignore[override]
        return 0 if isinstance(self.lengths, tuple) else 1

    def flatten(self) -> tuple[Any, tuple[Any, ...]]:
        if isinstance(self.lengths, tuple):
            return ("key_padding", self.lengths), ()
        return ("key_padding", _spec(self.lengths)), (self.lengths,)

    def unflatten(self, arrays: tuple[Any, ...]) -> Mask:
        return self if not arrays else _KeyPadding(arrays[0], self.lead)

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

    def tile_kind(self, g: Geometry, q_lo: int, q_hi: int, k_lo: int, k_hi: int) -> int:
        if not isinstance(self.lengths, tuple):
            return super().tile_kind(g, q_lo, q_hi, k_lo, k_hi)  # lengths known at run time
        if not self.lengths or g.kv_offset + k_lo >= max(self.lengths):
            return EMPTY
        return FULL if g.kv_offset + k_hi <= min(self.lengths) else PARTIAL

    def tile_live(self, xp: Any, device: Any, g: Geometry, rows: int, cols: int) -> Any:
        if isinstance(self.lengths, tuple) or g.S == 0:
            return None  # static lengths: tile_kind says all
        starts = xp.arange(0, g.S, cols, device=device) + g.kv_offset  # (n_k,) first keys
        return (starts < xp.max(self.lengths))[None, :]  # (1, n_k)

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
        check_same_library(xp, device, self.lengths, f"{name} (masks.key_padding lengths)")

    def __repr__(self) -> str:
        if isinstance(self.lengths, tuple):
            return f"masks.key_padding({list(self.lengths)})"
        return f"masks.key_padding(<array {tuple(self.lengths.shape)}>)"


def key_padding(lengths: Any) -> Mask:
    """Batch b attends only key positions < lengths[b]. ``lengths``: Python ints (keys past
    the longest are never touched) or an integer array (B,) (traceable, no skipping).
    The mask carries leading dims (B, 1): it broadcasts over heads."""
    if isinstance(lengths, Sequence) and not isinstance(lengths, str):
        lengths = tuple(int_lengths(lengths, "key_padding"))
        if not lengths or any(n < 0 for n in lengths):
            raise ParameterError(
                f"key_padding needs one length >= 0 per batch entry, got {list(lengths)!r}."
            )
        return _KeyPadding(lengths, (len(lengths), 1))
    xp = array_namespace_of(lengths, "key_padding lengths")
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
    holds_data = True  # class attributes, not fields
    arrays_held = 2

    def flatten(self) -> tuple[Any, tuple[Any, ...]]:
        return ("segments", _spec(self.q_ids), _spec(self.kv_ids), self.lead), (
            self.q_ids,
            self.kv_ids,
        )

    def unflatten(self, arrays: tuple[Any, ...]) -> Mask:
        return _Segments(arrays[0], arrays[1], self.lead)

    def tile(self, t: Tile) -> Any:
        q = t.rows(self.q_ids[..., :, None])  # (..., Bq, 1)
        k = t.columns(self.kv_ids[..., None, :])  # (..., 1, Sk)
        return q == k

    def tile_live(self, xp: Any, device: Any, g: Geometry, rows: int, cols: int) -> Any:
        """Tiles whose query ids and key ids share a value, by their ranges: query block
        i spans ids [lo_i, hi_i] and key block j [lo_j, hi_j] (over every leading slice);
        disjoint ranges share none (exact for ids sorted along the sequence: packed
        documents)."""
        if g.L == 0 or g.S == 0:
            return None
        q_lo, q_hi = _block_ranges(xp, self.q_ids, rows)  # (n_q,), (n_q,)
        k_lo, k_hi = _block_ranges(xp, self.kv_ids, cols)  # (n_k,), (n_k,)
        return (q_lo[:, None] <= k_hi[None, :]) & (k_lo[None, :] <= q_hi[:, None])

    def check(self, xp: Any, device: Any, g: Geometry, name: str) -> None:
        for ids, n, axis in ((self.q_ids, g.L, "L"), (self.kv_ids, g.S, "S")):
            what = f"{name} (masks.segments {'q_ids' if axis == 'L' else 'kv_ids'})"
            check_same_library(xp, device, ids, what)
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
        xp = array_namespace_of(ids, f"segments {what}")
        if ids.ndim < 1:
            raise ShapeError(f"segments {what} must have shape (..., length), got a scalar.")
        if not (xp.isdtype(ids.dtype, "integral") or ids.dtype == xp.bool):
            raise DTypeError(
                f"segments {what} must be integer ids, got dtype {ids.dtype}; cast them, e.g. "
                "ids.astype(int32)."
            )
    if broadcast_shapes(tuple(q_ids.shape[:-1]), tuple(kv_ids.shape[:-1])) is None:
        raise ShapeError(
            f"segments q_ids {tuple(q_ids.shape)} and kv_ids {tuple(kv_ids.shape)} have leading "
            "dims that do not broadcast; give them the same batch dims (..., L) and (..., S)."
        )
    lead = (*tuple(q_ids.shape[:-1]), 1) if q_ids.ndim > 1 else ()
    q = q_ids[..., None, :] if q_ids.ndim > 1 else q_ids  # (B, 1, L): a head axis
    k = kv_ids[..., None, :] if kv_ids.ndim > 1 else kv_ids
    return _Segments(q, k, lead)


def _spec(x: Any) -> tuple[Any, ...]:
    """An array's shape and dtype (a compiled program's key holds no array)."""
    return tuple(x.shape), str(x.dtype)


def _block_ranges(xp: Any, ids: Any, size: int) -> tuple[Any, Any]:
    """(min, max) of ``ids`` (..., N) over each block of ``size`` positions and every
    leading slice: two (ceil(N / size),) arrays (the last block repeats the last id)."""
    n = ids.shape[-1]
    blocks = -(-n // size)
    flat = xp.reshape(ids, (-1, n))  # (slices, N)
    if blocks * size != n:
        index = xp.clip(xp.arange(blocks * size, device=array_device(ids)), 0, n - 1)
        flat = xp.take(flat, index, axis=1)
    flat = xp.reshape(flat, (flat.shape[0], blocks, size))  # (slices, blocks, size)
    if flat.dtype == xp.bool:
        flat = xp.astype(flat, xp.int32)
    return xp.min(flat, axis=(0, 2)), xp.max(flat, axis=(0, 2))


@dataclass(frozen=True, eq=False)
class _Dense(Mask):
    array: Any  # bool (..., L|1, S|1)
    lead: tuple[int, ...] = ()
    holds_data = True  # class attributes, not fields
    arrays_held = 1

    def tile(self, t: Tile) -> Any:
        return t.columns(t.rows(self.array))

    def tile_live(self, xp: Any, device: Any, g: Geometry, rows: int, cols: int) -> Any:
        return tile_any(xp, self.array, rows, cols)

    def flatten(self) -> tuple[Any, tuple[Any, ...]]:
        return ("dense", _spec(self.array), self.lead), (self.array,)

    def unflatten(self, arrays: tuple[Any, ...]) -> Mask:
        return _Dense(arrays[0], self.lead)

    def check(self, xp: Any, device: Any, g: Geometry, name: str) -> None:
        what = f"{name} (masks.dense)"
        check_same_library(xp, device, self.array, what)
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
    xp = array_namespace_of(array, "masks.dense array")
    if array.dtype != xp.bool:
        raise DTypeError(
            f"masks.dense takes a bool array (True = may attend), got dtype {array.dtype}; "
            "pass a float additive mask (0 / -inf) directly as attn_mask, or a 0/1 mask as "
            "masks.dense(array != 0)."
        )
    if array.ndim < 2:
        array = xp.reshape(array, (1,) * (2 - array.ndim) + tuple(array.shape))
    return _Dense(array, tuple(array.shape[:-2]))
