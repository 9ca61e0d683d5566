"""Input checks of :func:`attnkit.multi_head_attention`: the call's flags and positions,
the inputs against the parameters, and the kv cache (the masks: :mod:`attnkit.multi_head.masks`).

Every check runs before any work and names the argument, its shape and the fix.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from array_api_compat import array_namespace
from array_api_compat import device as _device

from ..checks import check_flag
from ..errors import (
    ArgumentTypeError,
    DeviceMismatchError,
    DTypeError,
    NamespaceMismatchError,
    ParameterError,
    ShapeError,
)
from ..kv_cache import KVCache
from ..rope import Rope, check_positions
from ..shapes import broadcast_shapes, describe, type_name
from .params import MultiHeadParams, check_heads

__all__ = ["HeadShapes", "check_call", "check_inputs"]


class HeadShapes(NamedTuple):
    """The head counts and sizes of one call, as :func:`check_inputs` found them."""

    num_heads: int  # Hq
    num_kv_heads: int  # Hkv
    head_dim: int  # E
    value_head_dim: int  # Ev
    batch: tuple[int, ...] = ()  # the broadcast leading dims ... of query and key


def check_call(
    query: Any, key: Any, value: Any, cache: Any, flags: dict[str, Any], positions: dict[str, Any]
) -> None:
    """The non-array arguments of :func:`attnkit.multi_head_attention`, before any work:
    every flag a real bool, positions whole numbers, and a kv cache only for self-attention
    (``key`` and ``value`` None, or ``query`` itself)."""
    for name, flag in flags.items():
        check_flag(name, flag)
    for name, pos in positions.items():
        if pos is not None:
            check_positions(name, pos)
    if cache is None:
        return
    for name, x in (("key", key), ("value", value)):
        if x is not None and x is not query and not (name == "value" and x is key):
            got = describe(x) if hasattr(x, "shape") else type_name(x)
            raise ParameterError(
                f"a kv cache holds self-attention keys and values (projected from query at "
                f"each decoding step), but {name} {got} was given with cache= (cross-attention); "
                "decode with key=None and value=None, or call without cache= for "
                "cross-attention (an encoder's keys do not change between steps: project them "
                "once and pass them as key and value)."
            )


def _matrix(name: str, w: Any, rows: int | None, cols: int, why: str) -> int:
    if w is None or not hasattr(w, "shape") or w.ndim != 2:
        raise ShapeError(
            f"params.{name} must be a 2-D (out_features, in_features) array, got "
            f"{describe(w) if hasattr(w, 'shape') else type_name(w)}."
        )
    if (rows is not None and w.shape[0] != rows) or w.shape[1] != cols:
        want = f"({'?' if rows is None else rows}, {cols})"
        raise ShapeError(f"params.{name} must be {want} ({why}), got {tuple(w.shape)}.")
    return w.shape[0]


def _width(name: str, x: Any, wname: str, w: Any, what: str) -> None:
    """``x``'s last axis must be the in_features of ``params.<wname>``: blame ``x``."""
    if w is None or not hasattr(w, "shape") or w.ndim != 2:
        _matrix(wname, w, None, x.shape[-1], what)  # raises: not a 2-D weight
    if x.shape[-1] != w.shape[1]:
        raise ShapeError(
            f"{name} has {x.shape[-1]} features on its last axis but params.{wname} "
            f"{tuple(w.shape)} expects {what} {w.shape[1]}: {name} {describe(x)}; pass {name} "
            f"of shape (..., length, {w.shape[1]}), or params made for {x.shape[-1]} features."
        )


def _vector(name: str, b: Any, n: int) -> None:
    if b is not None and (not hasattr(b, "shape") or tuple(b.shape) != (n,)):
        got = tuple(b.shape) if hasattr(b, "shape") else type_name(b)
        raise ShapeError(f"params.{name} must have shape ({n},), got {got}.")


def check_inputs(
    query: Any,
    key: Any,
    value: Any,
    params: Any,
    num_heads: Any,
    num_kv_heads: Any,
    cache: Any,
    add_zero_attn: Any,
    rope: Any,
    *,
    key_name: str = "key",
    value_name: str = "value",
) -> HeadShapes:
    """Validate everything :func:`attnkit.multi_head_attention` receives.

    ``key_name`` / ``value_name`` say which argument the keys and values came from (the
    query in self-attention), so that a message names what the caller passed.
    """
    if not isinstance(params, MultiHeadParams):
        raise ArgumentTypeError(
            f"params must be an attnkit.MultiHeadParams, got {type_name(params)}; create one "
            "with attnkit.init_multi_head_params(...) or MultiHeadParams.from_packed(...)."
        )
    hq, hkv = check_heads(num_heads, num_kv_heads)
    for name, x in (("query", query), ("key", key), ("value", value)):
        if not hasattr(x, "shape") or x.ndim < 2:
            raise ShapeError(
                f"{name} must be an array of rank >= 2, (..., length, features); got "
                f"{describe(x) if hasattr(x, 'shape') else type_name(x)}."
            )
    arrays = [a for a in (query, key, value, *params) if a is not None]
    try:
        array_namespace(*arrays)
    except TypeError as err:
        raise NamespaceMismatchError(
            f"query, key, value and params must come from one array library: {err}"
        ) from None
    _width("query", query, "q_weight", params.q_weight, "d_model (query features)")
    _width(key_name, key, "k_weight", params.k_weight, "kdim (key features)")
    _width(value_name, value, "v_weight", params.v_weight, "vdim (value features)")
    rows = _matrix("q_weight", params.q_weight, None, query.shape[-1], "Hq * E, query features")
    if rows % hq:
        raise ShapeError(
            f"params.q_weight has {rows} rows, not a multiple of num_heads={hq}; it must be "
            "(num_heads * head_dim, query features)."
        )
    e = rows // hq
    _matrix("k_weight", params.k_weight, hkv * e, key.shape[-1], "Hkv * E, key features")
    vrows = _matrix("v_weight", params.v_weight, None, value.shape[-1], "Hkv * Ev, value features")
    if vrows % hkv:
        raise ShapeError(f"params.v_weight has {vrows} rows, not a multiple of num_kv_heads={hkv}.")
    ev = vrows // hkv
    _matrix("out_weight", params.out_weight, None, hq * ev, "output features, Hq * Ev")
    for name, n in (
        ("q_bias", hq * e),
        ("k_bias", hkv * e),
        ("v_bias", hkv * ev),
        ("out_bias", params.out_weight.shape[0]),
        ("bias_k", hkv * e),
        ("bias_v", hkv * ev),
    ):
        _vector(name, getattr(params, name), n)
    if (params.bias_k is None) != (params.bias_v is None):
        raise ParameterError(
            "params.bias_k and params.bias_v must be given together or not at all."
        )
    if key.shape[-2] != value.shape[-2]:
        raise ShapeError(
            f"{key_name} and {value_name} must have the same length S: {key_name} "
            f"{describe(key)}, {value_name} {describe(value)}."
        )
    batch = broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    if batch is None:
        raise ShapeError(
            f"the leading dims (all axes before -2) of query {describe(query)}, {key_name} "
            f"{describe(key)} and {value_name} {describe(value)} do not broadcast; make them "
            "equal or 1 (inputs are (..., length, features), heads are split inside)."
        )
    for name, a in (
        ("key", key),
        ("value", value),
        *((f"params.{n}", getattr(params, n)) for n in params._fields),
    ):
        if a is not None and a.dtype != query.dtype:
            raise DTypeError(
                f"{name} has dtype {a.dtype} but query has {query.dtype}; cast the inputs and "
                "parameters to one floating dtype."
            )
    check_flag("add_zero_attn", add_zero_attn)
    if rope is not None and not isinstance(rope, Rope):
        raise ArgumentTypeError(f"rope must be None or an attnkit.Rope, got {type_name(rope)}.")
    if rope is not None and (e % 2 or (rope.rotary_dim or e) > e):
        raise ShapeError(
            f"rope rotates {rope.rotary_dim or e} features but heads have E={e}; "
            "use an even head size or Rope(rotary_dim=an even number <= E)."
        )
    if cache is not None:
        if not isinstance(cache, KVCache):
            raise ArgumentTypeError(f"cache must be an attnkit.KVCache, got {type_name(cache)}.")
        if params.bias_k is not None or add_zero_attn:
            raise ParameterError(
                "a kv cache cannot be combined with add_bias_kv or add_zero_attn (they append "
                "keys at the end of every sequence); decode without them."
            )
        _check_cache(cache, query, hkv, e, ev)
    return HeadShapes(hq, hkv, e, ev, batch)


def _check_cache(cache: Any, query: Any, hkv: int, e: int, ev: int) -> None:
    """The cache must hold query's library, dtype, device, batch dims and head sizes."""
    for name, a in (("cache.key", cache.key), ("cache.value", cache.value)):
        if not hasattr(a, "shape") or a.ndim < 3:
            got = describe(a) if hasattr(a, "shape") else type_name(a)
            raise ShapeError(
                f"{name} must be an array (..., Hkv, T, E) from attnkit.init_kv_cache, got {got}."
            )
        if type(a) is not type(query) and array_namespace(a) is not array_namespace(query):
            raise NamespaceMismatchError(
                f"{name} is a {type_name(a)} but query a {type_name(query)}; create the cache "
                "with attnkit.init_kv_cache(..., like=) an array of query's library."
            )
        if a.dtype != query.dtype:
            raise DTypeError(
                f"{name} has dtype {a.dtype} but query has {query.dtype}; create the cache "
                "with init_kv_cache(..., like=) an array of the model's dtype."
            )
        there, here = _device(a), _device(query)
        if there is not None and here is not None and there != here:
            raise DeviceMismatchError(
                f"{name} is on device {there} but query is on {here}; create the cache on "
                "query's device (init_kv_cache(..., like=) an array there)."
            )
    if cache.key.shape[-3] != hkv or cache.key.shape[-1] != e or cache.value.shape[-1] != ev:
        raise ShapeError(
            f"cache.key {tuple(cache.key.shape)} and cache.value {tuple(cache.value.shape)} "
            f"must be (..., Hkv={hkv}, T, E={e}) and (..., {hkv}, T, Ev={ev})."
        )
    if tuple(cache.key.shape[:-3]) != tuple(query.shape[:-2]):
        raise ShapeError(
            f"cache.key {tuple(cache.key.shape)} has batch dims {tuple(cache.key.shape[:-3])} "
            f"but query {describe(query)} has {tuple(query.shape[:-2])}; create the cache with "
            f"init_kv_cache(batch_shape={tuple(query.shape[:-2])}, ...)."
        )
