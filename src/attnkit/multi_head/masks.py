"""The masks of :func:`attnkit.multi_head_attention`: ``attn_mask`` and ``key_padding_mask``
checked as passed (bool: True = may attend / a real key), then assembled into one mask
for the core, with the appended bias_k / zero-attention keys and a kv cache's slots.
"""

from __future__ import annotations

from typing import Any

from array_api_compat import array_namespace
from array_api_compat import device as _device

from .. import masks as _masks
from ..errors import (
    ArgumentTypeError,
    DeviceMismatchError,
    DTypeError,
    NamespaceMismatchError,
    ParameterError,
    ShapeError,
)
from ..shapes import broadcast_shapes, describe, type_name
from .checks import HeadShapes

__all__ = ["and_mask", "check_masks", "combine_masks"]


def _pad_last(xp: Any, m: Any, n: int) -> Any:
    """Append n 'may attend' columns to a bool or additive mask's last axis."""
    fill = (
        xp.ones((*m.shape[:-1], n), dtype=xp.bool, device=_device(m))
        if m.dtype == xp.bool
        else xp.zeros((*m.shape[:-1], n), dtype=m.dtype, device=_device(m))
    )
    return xp.concat([m, fill], axis=-1)


def _additive(xp: Any, m: Any, dtype: Any) -> Any:
    zero = xp.asarray(0.0, dtype=dtype, device=_device(m))
    return xp.where(m, zero, xp.asarray(-xp.inf, dtype=dtype, device=_device(m)))


def _check_mask_array(
    name: str, m: Any, query: Any, target: tuple[int, ...], legend: str, meaning: str
) -> None:
    """A dense mask argument: an array of query's library and device, bool or real floating,
    whose shape broadcasts to ``target`` (``legend`` in the shape vocabulary) without
    enlarging it; ``meaning`` says what its values mean."""
    if not hasattr(m, "shape") or not hasattr(m, "dtype"):
        raise ArgumentTypeError(
            f"{name} must be None or an array ({meaning}), got {type_name(m)}; convert it "
            f"first, e.g. numpy.asarray({name})."
        )
    if type(m) is not type(query) and array_namespace(m) is not array_namespace(query):
        raise NamespaceMismatchError(
            f"{name} is a {type_name(m)} but query a {type_name(query)}; convert {name} to "
            "query's array type."
        )
    xp = array_namespace(m)
    if not (m.dtype == xp.bool or xp.isdtype(m.dtype, "real floating")):
        raise DTypeError(
            f"{name} has dtype {m.dtype} ({describe(m)}); expected {meaning}: cast it, e.g. "
            f"{name} != 0 for a 0/1 integer mask whose 1 marks a real key."
        )
    there, here = _device(m), _device(query)
    if there is not None and here is not None and there != here:
        raise DeviceMismatchError(
            f"{name} is on device {there} but query is on {here}; move {name} to query's device."
        )
    if broadcast_shapes(tuple(m.shape), target) != target:
        raise ShapeError(
            f"{name} of shape {tuple(m.shape)} does not broadcast to {target}, {legend}: each "
            f"axis must equal the target's or be 1 (query is {describe(query)})."
        )


def check_masks(
    attn_mask: Any, key_padding_mask: Any, n_extra: int, S: int, query: Any, shapes: HeadShapes
) -> None:
    """``attn_mask`` and ``key_padding_mask`` as the caller passed them (names, shapes),
    before any work. ``S`` counts the keys attended (the cache's T slots with a cache),
    including the ``n_extra`` appended ones (bias_k, zero attention)."""
    s0 = S - n_extra
    kpm, m = key_padding_mask, attn_mask
    if kpm is not None:
        _check_mask_array(
            "key_padding_mask",
            kpm,
            query,
            (*shapes.batch, s0),
            f"(..., S) with S={s0} keys",
            "bool, True = a real key that may be attended, or a float added to the scores",
        )
        if kpm.ndim < 1:
            raise ShapeError(
                f"key_padding_mask must be (..., S) with S={s0} keys, got a scalar "
                f"{describe(kpm)}; give one entry per key."
            )
    if isinstance(m, _masks.Mask):
        if n_extra:
            raise ParameterError(
                "a structured attnkit.masks mask cannot be combined with add_bias_kv or "
                "add_zero_attn; pass a dense bool array instead."
            )
        if kpm is not None and kpm.dtype != array_namespace(kpm).bool:
            raise DTypeError(
                f"with a structured attn_mask, key_padding_mask must be bool (True = real key), "
                f"got {describe(kpm)}; pass key_padding_mask > -inf for a 0 / -inf float mask."
            )
        return
    if m is None:
        return
    if not hasattr(m, "shape") or not hasattr(m, "dtype"):
        raise ArgumentTypeError(
            f"attn_mask must be None, an array or an attnkit.masks mask, got {type_name(m)}."
        )
    last = s0 if m.ndim >= 1 and m.shape[-1] == s0 else S
    _check_mask_array(
        "attn_mask",
        m,
        query,
        (*shapes.batch, shapes.num_heads, query.shape[-2], last),
        "(..., Hq, L, S)",
        "bool, True = may attend, or additive float",
    )


def combine_masks(xp: Any, attn_mask: Any, key_padding_mask: Any, n_extra: int, S: int) -> Any:
    """One mask for the core from ``attn_mask`` and ``key_padding_mask`` (checked by
    :func:`check_masks`); the ``n_extra`` appended keys may be attended by every query."""
    s0 = S - n_extra
    kpm = key_padding_mask
    if kpm is not None:
        if n_extra:
            kpm = _pad_last(xp, kpm, n_extra)
        kpm = kpm[..., None, None, :]  # (..., 1, 1, S): broadcast over heads and queries
    m = attn_mask
    if isinstance(m, _masks.Mask):
        return m if kpm is None else m & _masks.dense(kpm)
    if m is not None and m.ndim >= 1 and m.shape[-1] == s0 and n_extra:
        m = _pad_last(xp, m, n_extra)
    if m is None or kpm is None:
        return kpm if m is None else m
    if m.dtype == xp.bool and kpm.dtype == xp.bool:
        return m & kpm
    dtype = kpm.dtype if m.dtype == xp.bool else m.dtype
    m = _additive(xp, m, dtype) if m.dtype == xp.bool else m
    kpm = _additive(xp, kpm, dtype) if kpm.dtype == xp.bool else kpm
    return m + kpm


def and_mask(xp: Any, mask: Any, allowed: Any) -> Any:
    """Combine a user mask (bool, additive float or a Mask) with bool ``allowed``."""
    if isinstance(mask, _masks.Mask):
        return mask & _masks.dense(allowed)
    if mask.dtype == xp.bool:
        return mask & allowed
    return xp.where(allowed, mask, xp.asarray(-xp.inf, dtype=mask.dtype, device=_device(mask)))
