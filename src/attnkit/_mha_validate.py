"""Input checks and mask assembly for :func:`attnkit.multi_head_attention`.

Every check runs before any work and names the argument, its shape and the fix.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from array_api_compat import array_namespace
from array_api_compat import device as _device

from . import masks as _masks
from .errors import (
    ArgumentTypeError,
    DeviceMismatchError,
    DTypeError,
    NamespaceMismatchError,
    ParameterError,
    ShapeError,
)
from .shapes import broadcast_shapes, describe, type_name

__all__ = [
    "HeadShapes",
    "check_call",
    "check_flag",
    "check_heads",
    "check_inputs",
    "check_masks",
    "combine_masks",
    "packed_split",
]


class HeadShapes(NamedTuple):
    num_heads: int  # Hq
    num_kv_heads: int  # Hkv
    head_dim: int  # E
    value_head_dim: int  # Ev
    batch: tuple[int, ...] = ()  # the broadcast leading dims ... of query and key


def check_flag(name: str, value: Any) -> None:
    """A boolean argument must be True or False: "yes", 0 or None are refused, not taken by
    truthiness (as ``is_causal`` of the core)."""
    if not isinstance(value, bool):
        raise ParameterError(
            f"{name} must be True or False, got {value!r} ({type(value).__name__}); pass a "
            f"bool (e.g. {name}=bool(...))."
        )


def check_call(
    query: Any, key: Any, value: Any, cache: Any, flags: dict[str, Any], positions: dict[str, Any]
) -> None:
    """The non-array arguments of :func:`attnkit.multi_head_attention`, before any work:
    every flag a real bool, positions whole numbers, and a kv cache only for self-attention
    (``key`` and ``value`` None, or ``query`` itself)."""
    from .rope import check_positions

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


def check_heads(num_heads: Any, num_kv_heads: Any) -> tuple[int, int]:
    """Validated (Hq, Hkv); Hkv defaults to Hq and must divide it."""
    for name, h in (("num_heads", num_heads), ("num_kv_heads", num_kv_heads)):
        if h is None and name == "num_kv_heads":
            continue
        if isinstance(h, bool) or not isinstance(h, int) or h < 1:
            raise ParameterError(f"{name} must be a positive int, got {h!r}.")
    hkv = num_heads if num_kv_heads is None else num_kv_heads
    if num_heads % hkv:
        raise ParameterError(
            f"num_heads={num_heads} is not a multiple of num_kv_heads={hkv}; each key/value "
            "head serves num_heads / num_kv_heads query heads (GQA). Pick a divisor of "
            f"{num_heads} for num_kv_heads."
        )
    return num_heads, hkv


def packed_split(w: Any, num_heads: int, num_kv_heads: int | None, name: str) -> tuple:
    """Slice a packed ((Hq + 2 Hkv) * E, ...) projection into its q, k, v rows."""
    hq, hkv = check_heads(num_heads, num_kv_heads)
    groups = hq + 2 * hkv
    rows = w.shape[0] if w.ndim else 0
    if w.ndim not in (1, 2) or rows % groups:
        raise ShapeError(
            f"{name} must have (num_heads + 2 * num_kv_heads) * head_dim = {groups} * E rows, "
            f"got {name} {describe(w)}; check num_heads={hq} and num_kv_heads={hkv}."
        )
    e = rows // groups
    return w[: hq * e, ...], w[hq * e : (hq + hkv) * e, ...], w[(hq + hkv) * e :, ...]


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
    from .kv_cache import KVCache
    from .multi_head import MultiHeadParams
    from .rope import Rope

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
    if not isinstance(add_zero_attn, bool):
        raise ParameterError(f"add_zero_attn must be True or False, got {add_zero_attn!r}.")
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
