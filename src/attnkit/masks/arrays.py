"""Masks carried by the caller's data: key padding by lengths, segment ids, and any dense
bool array. Their arrays must share the query's library and device (checked per call);
their leading dims broadcast over the inputs' (..., Hq)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import DTypeError, ParameterError, ShapeError
from ..shapes import broadcast_shapes
from .algebra import Mask
from .geometry import Geometry, Ranges, Tile
from .validation import array_namespace_of, check_same_library, int_lengths

__all__ = ["dense", "key_padding", "segments"]


@dataclass(frozen=True, eq=False)
class _KeyPadding(Mask):
    lengths: Any  # tuple of ints (static) or an integer array (B,)
    lead: tuple[int, ...] = ()
    keys_only = True  # a class attribute, not a field

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

    def tile(self, t: Tile) -> Any:
        q = self.q_ids[..., t.q_lo : t.q_hi][..., :, None]  # (..., Bq, 1)
        k = t.columns(self.kv_ids[..., None, :])  # (..., 1, Sk)
        return q == k

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


@dataclass(frozen=True, eq=False)
class _Dense(Mask):
    array: Any  # bool (..., L|1, S|1)
    lead: tuple[int, ...] = ()

    def tile(self, t: Tile) -> Any:
        return t.columns(t.rows(self.array))

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
