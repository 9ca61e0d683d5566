"""A functional, preallocated key/value cache for incremental decoding.

Shape legend: ``...`` leading dims (batch), Hkv key/value heads, T the capacity
(``max_length``), L new positions per step, E key features, Ev value features.

The cache is a named tuple of arrays (a JAX pytree, for ``jax.jit`` and ``jax.lax.scan``);
``length`` is a 0-d integer array. :func:`append_kv` returns a new cache, writing at a
traced offset with ``take`` + ``where`` over the T slots (O(T) per step).

.. code-block:: python

    import attnkit as ak

    rng = np.random.default_rng(0)
    params = ak.init_multi_head_params(64, 8, num_kv_heads=2, rng=rng)  # GQA: 8 query heads, 2 kv
    prompt = rng.standard_normal((1, 5, 64), dtype=np.float32)
    opts = dict(num_heads=8, num_kv_heads=2, is_causal=True, rope=ak.Rope())
    cache = ak.init_kv_cache((1,), 2, 128, 8, like=prompt)  # (batch,), Hkv, max length, E
    out, _, cache = ak.multi_head_attention(prompt, params=params, cache=cache, **opts)
    token = rng.standard_normal((1, 1, 64), dtype=np.float32)
    out, _, cache = ak.multi_head_attention(token, params=params, cache=cache, **opts)

NumPy is imported as ``np``.
"""

from __future__ import annotations

import numbers
from typing import Any, NamedTuple

from array_api_compat import array_namespace, is_array_api_obj
from array_api_compat import device as _device

from .errors import (
    ArgumentTypeError,
    DeviceMismatchError,
    DTypeError,
    NamespaceMismatchError,
    ParameterError,
    ShapeError,
)
from .shapes import describe, type_name

__all__ = ["KVCache", "append_kv", "cache_mask", "init_kv_cache"]


class KVCache(NamedTuple):
    """Preallocated keys and values and how many positions are filled.

    ``key`` (..., Hkv, T, E), ``value`` (..., Hkv, T, Ev), ``length`` a 0-d integer
    array: slots ``0 .. length - 1`` hold positions ``0 .. length - 1``.
    """

    key: Any
    value: Any
    length: Any

    @property
    def max_length(self) -> int:
        """T, the number of slots."""
        return self.key.shape[-2]


def init_kv_cache(
    batch_shape: tuple[int, ...],
    num_kv_heads: int,
    max_length: int,
    head_dim: int,
    value_dim: int | None = None,
    *,
    like: Any,
) -> KVCache:
    """An empty cache: zeros of ``(*batch_shape, num_kv_heads, max_length, head_dim)``
    (values ``value_dim``, default ``head_dim``) in ``like``'s namespace, dtype and device.

    ``like`` is any array of the model's library, real floating dtype and device (a
    weight, an input); only those three are read from it.
    """
    value_dim = head_dim if value_dim is None else value_dim
    for name, v in (
        ("num_kv_heads", num_kv_heads),
        ("max_length", max_length),
        ("head_dim", head_dim),
        ("value_dim", value_dim),
    ):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ParameterError(f"{name} must be a positive int, got {v!r}.")
    if not isinstance(batch_shape, tuple | list) or not all(
        isinstance(n, numbers.Integral) and not isinstance(n, bool) and n >= 0 for n in batch_shape
    ):
        raise ParameterError(
            f"batch_shape must be a tuple of non-negative ints (the leading dims ...), got "
            f"{batch_shape!r}; e.g. (batch_size,), or () for no batch."
        )
    if not is_array_api_obj(like):
        raise ArgumentTypeError(
            f"like must be an array (NumPy, PyTorch, JAX or any array-API array) whose library, "
            f"dtype and device the cache takes, got {type_name(like)}; pass e.g. a projection "
            "weight or an input array, not a list or a dtype."
        )
    xp = array_namespace(like)
    if not xp.isdtype(like.dtype, "real floating"):
        raise DTypeError(
            f"like has dtype {like.dtype} ({describe(like)}); the cache takes like's dtype, "
            "which must be real floating: pass an array of the model's dtype (e.g. a weight)."
        )
    lead = (*(int(n) for n in batch_shape), num_kv_heads, max_length)
    kw = {"dtype": like.dtype, "device": _device(like)}
    return KVCache(
        xp.zeros((*lead, head_dim), **kw),
        xp.zeros((*lead, value_dim), **kw),
        xp.asarray(0, dtype=xp.int32, device=_device(like)),
    )


def _check_library(cache: KVCache, key: Any, value: Any) -> Any:
    """The cache's namespace; ``key`` and ``value`` must be arrays of the same library."""
    xp = array_namespace(cache.key, cache.value)
    for name, new in (("key", key), ("value", value)):
        if not is_array_api_obj(new):
            raise ArgumentTypeError(
                f"new {name} must be an array (..., Hkv, L, E) of the cache's library "
                f"({type_name(cache.key)}), got {type_name(new)}."
            )
        if type(new) is not type(cache.key) and array_namespace(new) is not xp:
            raise NamespaceMismatchError(
                f"new {name} is a {type_name(new)} but the cache holds {type_name(cache.key)} "
                f"arrays; append arrays of the cache's library (convert {name}), or create the "
                f"cache with like= an array of {name}'s library."
            )
    return xp


def _concrete(length: Any) -> int | None:
    """``int(length)`` when it is known (not traced under jit), else None."""
    try:
        return int(length)
    except Exception:  # a JAX tracer: the bound is checked only outside jit
        return None


def append_kv(cache: KVCache, key: Any, value: Any) -> KVCache:
    """Write ``key`` (..., Hkv, L, E) and ``value`` (..., Hkv, L, Ev) at slots
    ``length .. length + L - 1``; return the new cache (the old one is unchanged).

    Plain formula: ``cache.key[..., length:length + L, :] = key; length += L``.
    Raises before any work: ``NamespaceMismatchError``, ``DTypeError`` or
    ``DeviceMismatchError`` if ``key`` / ``value`` are not of the cache's library, dtype
    and device, ``ShapeError`` if their shapes do not match the cache or (outside jit) the
    cache would overflow.
    """
    if not isinstance(cache, KVCache):
        raise ParameterError(
            f"cache must be an attnkit.KVCache (from attnkit.init_kv_cache), got "
            f"{type(cache).__name__}."
        )
    xp = _check_library(cache, key, value)
    for name, new, old in (("key", key, cache.key), ("value", value, cache.value)):
        if new.ndim < 2:
            raise ShapeError(
                f"new {name} must be (..., Hkv, L, {old.shape[-1]}) like the cache, got "
                f"{name} {describe(new)}; add the missing axes (cache.{name} is "
                f"{tuple(old.shape)})."
            )
        if new.shape[:-2] != old.shape[:-2] or new.shape[-1] != old.shape[-1]:
            raise ShapeError(
                f"new {name} must be (..., Hkv, L, {old.shape[-1]}) with (..., Hkv) = "
                f"{tuple(old.shape[:-2])} like the cache; got {name} {describe(new)} and "
                f"cache.{name} {tuple(old.shape)}."
            )
        if new.dtype != old.dtype:
            raise DTypeError(
                f"new {name} has dtype {new.dtype} but the cache holds {old.dtype}; "
                f"create the cache with like= an array of the model's dtype, or cast {name} "
                f"to {old.dtype}."
            )
        new_device, old_device = _device(new), _device(old)
        # JAX tracers (under jit) may report no device: nothing to compare there.
        if new_device is not None and old_device is not None and new_device != old_device:
            raise DeviceMismatchError(
                f"new {name} is on device {new_device} but the cache is on {old_device}; "
                f"move {name} to the cache's device, or create the cache with like= an array "
                "on that device."
            )
    L, T = key.shape[-2], cache.max_length
    if value.shape[-2] != L:
        raise ShapeError(f"new key has {L} positions but new value {value.shape[-2]}.")
    if L == 0:
        return cache
    start = _concrete(cache.length)
    if start is not None and start + L > T:
        raise ShapeError(
            f"the kv cache holds {T} positions; {start} are filled and {L} more do not fit. "
            f"Create it with a larger max_length (at least {start + L})."
        )
    slot = xp.arange(T, device=_device(key))  # (T,)
    src = slot - xp.astype(cache.length, slot.dtype)  # (T,) index into the new rows
    fresh = (src >= 0) & (src < L)  # (T,)
    src = xp.clip(src, 0, L - 1)

    def write(new: Any, old: Any) -> Any:
        placed = xp.take(new, src, axis=new.ndim - 2)  # (..., Hkv, T, E)
        return xp.where(fresh[:, None], placed, old)

    return KVCache(write(key, cache.key), write(value, cache.value), cache.length + L)


def cache_mask(
    length: Any,
    L: int,
    T: int,
    *,
    is_causal: bool,
    window: tuple[int | None, int | None] | None,
    xp: Any,
    device: Any,
) -> Any:
    """bool (L, T): which cache slots each of L new queries may attend.

    The queries sit at positions ``length .. length + L - 1`` (``length`` before the
    append). Slots at or beyond ``length + L`` are empty and never attended; with
    ``is_causal`` query p sees slots <= p; with ``window=(left, right)`` slots in
    ``p - left .. p + right`` (None = unbounded).
    """
    start = xp.astype(xp.asarray(length, device=device), xp.int32)  # 0-d
    q_pos = (xp.arange(L, dtype=xp.int32, device=device) + start)[:, None]  # (L, 1)
    k_pos = xp.arange(T, dtype=xp.int32, device=device)[None, :]  # (1, T)
    allowed = k_pos < start + L  # (1, T)
    if is_causal:
        allowed = allowed & (k_pos <= q_pos)  # (L, T)
    if window is not None:
        left, right = window
        if left is not None:
            allowed = allowed & (q_pos - k_pos <= left)
        if right is not None:
            allowed = allowed & (k_pos - q_pos <= right)
    return xp.broadcast_to(allowed, (L, T))
