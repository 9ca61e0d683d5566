"""Input checks and mask assembly for :func:`attnkit.multi_head_attention`.

Every check runs before any work and names the argument, its shape and the fix.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from array_api_compat import array_namespace
from array_api_compat import device as _device

from . import masks as _masks
from ._shapes import describe, type_name
from .errors import (
    ArgumentTypeError,
    DTypeError,
    NamespaceMismatchError,
    ParameterError,
    ShapeError,
)

__all__ = ["HeadShapes", "check_heads", "check_inputs", "combine_masks", "packed_split"]


class HeadShapes(NamedTuple):
    num_heads: int  # Hq
    num_kv_heads: int  # Hkv
    head_dim: int  # E
    value_head_dim: int  # Ev


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
) -> HeadShapes:
    """Validate everything :func:`attnkit.multi_head_attention` receives."""
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
            f"key and value must have the same length S: key {describe(key)}, "
            f"value {describe(value)}."
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
        if cache.key.shape[-3] != hkv or cache.key.shape[-1] != e or cache.value.shape[-1] != ev:
            raise ShapeError(
                f"cache.key {tuple(cache.key.shape)} and cache.value {tuple(cache.value.shape)} "
                f"must be (..., Hkv={hkv}, T, E={e}) and (..., {hkv}, T, Ev={ev})."
            )
    return HeadShapes(hq, hkv, e, ev)


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


def combine_masks(
    xp: Any, attn_mask: Any, key_padding_mask: Any, n_extra: int, S: int, query: Any
) -> Any:
    """One mask for the core from ``attn_mask`` and ``key_padding_mask``.

    ``S`` counts the keys attended, including the ``n_extra`` appended ones (bias_k,
    zero attention), which every query may attend.
    """
    s0 = S - n_extra
    kpm = key_padding_mask
    if kpm is not None:
        if not hasattr(kpm, "shape") or kpm.ndim < 1 or kpm.shape[-1] != s0:
            got = describe(kpm) if hasattr(kpm, "shape") else type_name(kpm)
            raise ShapeError(
                f"key_padding_mask must be (..., S) with S={s0} keys (True = a real key), "
                f"got {got}."
            )
        if n_extra:
            kpm = _pad_last(xp, kpm, n_extra)
        kpm = kpm[..., None, None, :]  # (..., 1, 1, S): broadcast over heads and queries
    m = attn_mask
    if isinstance(m, _masks.Mask):
        if n_extra:
            raise ParameterError(
                "a structured attnkit.masks mask cannot be combined with add_bias_kv or "
                "add_zero_attn; pass a dense bool array instead."
            )
        if kpm is None:
            return m
        if kpm.dtype != xp.bool:
            raise DTypeError(
                "with a structured attn_mask, key_padding_mask must be bool (True = real key)."
            )
        return m & _masks.dense(kpm)
    if m is not None:
        if not hasattr(m, "shape"):
            raise ArgumentTypeError(
                f"attn_mask must be None, an array or an attnkit.masks mask, got {type_name(m)}."
            )
        if m.ndim >= 1 and m.shape[-1] == s0 and n_extra:
            m = _pad_last(xp, m, n_extra)
    if m is None or kpm is None:
        return kpm if m is None else m
    if m.dtype == xp.bool and kpm.dtype == xp.bool:
        return m & kpm
    dtype = kpm.dtype if m.dtype == xp.bool else m.dtype
    m = _additive(xp, m, dtype) if m.dtype == xp.bool else m
    kpm = _additive(xp, kpm, dtype) if kpm.dtype == xp.bool else kpm
    return m + kpm
