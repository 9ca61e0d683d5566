"""Checks of the array arguments: library, rank, dtype, device, shapes, heads, masks.

They read attributes, never values; messages name the argument, its shape or dtype,
what was expected and the fix.
"""

from __future__ import annotations

from typing import Any

import array_api_compat as aac

from .errors import (
    ArgumentTypeError,
    DeviceMismatchError,
    DTypeError,
    NamespaceMismatchError,
    ShapeError,
)
from .masks import Mask
from .shapes import broadcast_shapes, describe

__all__ = ["check_arrays", "check_mask_shape", "check_shapes", "one_head_broadcast"]


def _namespace(name: str, x: Any) -> Any:
    if not aac.is_array_api_obj(x):
        raise ArgumentTypeError(
            f"{name} must be an array (NumPy, PyTorch, JAX or any array-API array), "
            f"got {type(x).__name__}; convert it first, e.g. numpy.asarray({name})."
        )
    return aac.array_namespace(x)


def _same_library(x: Any, query: Any, xp: Any) -> bool:
    # Same type, same library: skips array_namespace on the hot path (decoding steps).
    return type(x) is type(query) or _namespace_of(x) is xp


def _namespace_of(x: Any) -> Any:
    return aac.array_namespace(x) if aac.is_array_api_obj(x) else None


def _device_of(x: Any, like: Any) -> Any:
    if type(x) is type(like):
        try:
            return x.device  # torch, NumPy >= 2, array-api-strict, concrete JAX arrays
        except Exception:  # JAX tracers have no device
            pass
    return aac.device(x)


def check_arrays(query: Any, key: Any, value: Any, attn_mask: Any) -> tuple[Any, Any]:
    """Namespace, rank, dtype and device checks; returns (xp, device).

    This runs on every call, decoding steps included, so it reads only attributes and
    calls array_namespace once where all inputs share a type.
    """
    named = [("query", query), ("key", key), ("value", value)]
    if attn_mask is not None and not isinstance(attn_mask, Mask):
        named.append(("attn_mask", attn_mask))
    xp = _namespace("query", query)
    for name, x in named[1:]:
        if not _same_library(x, query, xp):
            _namespace(name, x)  # raises for non-arrays
            raise NamespaceMismatchError(
                f"{name} comes from {type(x).__module__}.{type(x).__name__} but query from "
                f"{type(query).__module__}.{type(query).__name__}; attention needs arrays of "
                f"one library: convert {name} to query's array type."
            )
    for name, x in named[:3]:
        if x.ndim < 2:
            raise ShapeError(
                f"{name} must have rank >= 2 (..., length, features), got shape "
                f"{tuple(x.shape)}; add a length axis, e.g. {name}[None, :]."
            )
        if getattr(x, "is_nested", False) is True:
            raise ArgumentTypeError(
                f"{name} is a nested (jagged) tensor {describe(x)}; attnkit takes dense arrays: "
                f"pad it (torch.nested.to_padded_tensor({name}, 0.0)) and mask the padding "
                "with attn_mask=attnkit.masks.key_padding(lengths)."
            )
        if (x is query or x.dtype != query.dtype) and not xp.isdtype(x.dtype, "real floating"):
            raise DTypeError(
                f"{name} has dtype {x.dtype} ({describe(x)}); attention needs real floating "
                f"arrays: cast it, e.g. {name}.astype(float32)."
            )
        if x is query and x.dtype not in _supported_dtypes(xp):
            raise DTypeError(
                f"{name} has dtype {x.dtype} ({describe(x)}); attnkit computes in float16, "
                f"bfloat16, float32 or float64: cast it, e.g. {name}.astype(float64) (NumPy's "
                "longdouble would otherwise be computed in a lower precision than it claims)."
            )
    for name, x in named[1:3]:
        if x.dtype != query.dtype:
            raise DTypeError(
                f"{name} is {describe(x)} but query is {describe(query)}; query, key and value "
                f"must share one dtype: cast {name} to {query.dtype}."
            )
    if (
        attn_mask is not None
        and not isinstance(attn_mask, Mask)
        and not (attn_mask.dtype == xp.bool or xp.isdtype(attn_mask.dtype, "real floating"))
    ):
        raise DTypeError(
            f"attn_mask has dtype {attn_mask.dtype} ({describe(attn_mask)}); expected bool "
            "(True = may attend) or a real floating additive mask (0 or -inf): cast it, e.g. "
            "attn_mask != 0 for a 0/1 integer mask."
        )
    device = aac.device(query)
    for name, x in named[1:]:
        other = _device_of(x, query) if device is not None else None
        # JAX tracers (under jit or grad) report no device: nothing to compare there.
        if other != device and other is not None and device is not None:
            raise DeviceMismatchError(
                f"{name} is on device {other} but query is on {device}; move {name} to "
                f"query's device (e.g. {name}.to_device(query.device) or {name}.to(device))."
            )
    return xp, device


_LAYOUT_HINT = (
    ". attnkit expects (..., H, L, E): inputs in (B, L, H, E) layout (FlashAttention, "
    "jax.nn, projections before the head transpose) must be transposed to (B, H, L, E) "
    "first: x.transpose(1, 2) in PyTorch, jnp.swapaxes(x, 1, 2) or np.swapaxes(x, 1, 2)"
)


def _supported_dtypes(xp: Any) -> tuple[Any, ...]:
    """float32 and float64, and the 16-bit floats the namespace has (computed in float32)."""
    extra = tuple(getattr(xp, name) for name in ("float16", "bfloat16") if hasattr(xp, name))
    return (xp.float32, xp.float64, *extra)


def one_head_broadcast(xp: Any, key: Any, value: Any) -> tuple[Any, Any]:
    """``(key, value)`` with a key or value of one head (axis -3) broadcast to the other's
    heads, under ``enable_gqa``: PyTorch repeats key and value heads separately, so a
    (..., 1, S, Ev) value serves (..., Hkv, S, E) keys. A broadcast is a view, and the
    frameworks' autodiff sums its gradient back to the one head."""
    if key.ndim < 3 or value.ndim < 3 or key.shape[-3] == value.shape[-3]:
        return key, value
    if value.shape[-3] == 1:
        return key, xp.broadcast_to(value, (*value.shape[:-3], key.shape[-3], *value.shape[-2:]))
    if key.shape[-3] == 1:
        return xp.broadcast_to(key, (*key.shape[:-3], value.shape[-3], *key.shape[-2:])), value
    return key, value


def check_shapes(query: Any, key: Any, value: Any, enable_gqa: bool) -> tuple[int, tuple[int, ...]]:
    """Feature, length and head checks; returns (G, out_lead)."""
    shapes = f"query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
    if key.shape[-1] != query.shape[-1]:
        raise ShapeError(
            f"key has {key.shape[-1]} features on its last axis but query has "
            f"{query.shape[-1]}: {shapes}. Query and key must share E (value may differ)."
        )
    if value.shape[-2] != key.shape[-2]:
        raise ShapeError(
            f"value has length {value.shape[-2]} on axis -2 but key has {key.shape[-2]}: "
            f"{shapes}. Key and value must have one row per key position (same S)."
        )
    groups = 1
    q_heads = query.shape[-3] if query.ndim >= 3 else 1
    kv_heads = key.shape[-3] if key.ndim >= 3 else 1
    v_heads = value.shape[-3] if value.ndim >= 3 else 1
    if enable_gqa and key.ndim >= 3 and v_heads != kv_heads:
        raise ShapeError(
            f"enable_gqa needs key and value to have the same heads on axis -3, got key "
            f"Hkv={kv_heads} and value {v_heads} heads: {shapes}. attnkit groups query "
            "heads over one key/value head count (PyTorch's math backend repeats key and "
            "value heads separately, a documented difference); give value the key's heads "
            "(or one head, which broadcasts)."
        )
    if enable_gqa and query.ndim >= 3 and key.ndim >= 3 and q_heads != kv_heads:
        if kv_heads == 0 or q_heads % kv_heads != 0:
            raise ShapeError(
                f"enable_gqa needs query heads Hq divisible by key heads Hkv on axis -3, got "
                f"Hq={q_heads} and Hkv={kv_heads}: {shapes}. Use Hkv among the divisors of Hq"
                f"{_LAYOUT_HINT if query.ndim >= 4 else ''}."
            )
        groups = q_heads // kv_heads
        batch = broadcast_shapes(query.shape[:-3], key.shape[:-3], value.shape[:-3])
        if batch is None:
            raise ShapeError(
                f"the batch dims (all axes before the head axis -3) do not broadcast: {shapes}. "
                "Make them equal or 1."
            )
        return groups, (*batch, q_heads)
    lead = broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    if lead is None:
        hint = "Make the leading dims equal or 1"
        if query.ndim >= 3 and key.ndim >= 3 and q_heads != kv_heads and kv_heads != 1:
            hint = (
                f"attnkit expects (..., H, L, E): if axis -3 holds heads, query has Hq={q_heads} "
                f"and key Hkv={kv_heads}: set enable_gqa=True for grouped-query attention, or "
                "make them equal"
            )
        if query.ndim >= 4:
            hint += _LAYOUT_HINT
        raise ShapeError(
            f"the leading dims (all axes before -2) do not broadcast: {shapes}. {hint}."
        )
    return groups, lead


def check_mask_shape(attn_mask: Any, out_lead: tuple[int, ...], L: int, S: int) -> None:
    target = (*out_lead, L, S)
    if broadcast_shapes(tuple(attn_mask.shape), target) != target:
        raise ShapeError(
            f"attn_mask of shape {tuple(attn_mask.shape)} does not broadcast to the attention "
            f"shape (..., Hq, L, S) = {target}; each axis must equal the target's or be 1 "
            f"(e.g. (L, S) = {(L, S)}, (1, S), or (B, 1, L, S))."
        )
