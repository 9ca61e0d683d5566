"""The multi-head attention layer: projections, heads, attention, output projection."""

from __future__ import annotations

from typing import Any, NamedTuple

from array_api_compat import array_namespace
from array_api_compat import device as _device

from ..attention import scaled_dot_product_attention
from ..kv_cache import KVCache, append_kv, cache_mask
from ..masks import window_sides
from ..rope import Rope, apply_rope
from .checks import check_call, check_inputs
from .masks import and_mask, check_masks, combine_masks
from .params import MultiHeadParams

__all__ = ["MultiHeadOutput", "MultiHeadParams", "multi_head_attention"]


class MultiHeadOutput(NamedTuple):
    """``(output, weights, cache)``: ``output`` (..., L, Do); ``weights`` None unless
    ``need_weights`` ((..., L, S) averaged over heads, else (..., Hq, L, S)); ``cache``
    the updated :class:`~attnkit.KVCache` when one was given, else None."""

    output: Any
    weights: Any
    cache: Any


def _linear(xp: Any, x: Any, w: Any, b: Any) -> Any:
    y = xp.matmul(x, xp.matrix_transpose(w))  # (..., N, out)
    return y if b is None else y + b


def _heads(xp: Any, x: Any, h: int) -> Any:
    """(..., N, h * d) -> (..., h, N, d)."""
    *lead, n, hd = x.shape
    x = xp.reshape(x, (*lead, n, h, hd // h))  # (..., N, h, d)
    r = x.ndim
    return xp.permute_dims(x, (*range(r - 3), r - 2, r - 3, r - 1))  # (..., h, N, d)


def _merge_heads(xp: Any, x: Any) -> Any:
    """(..., h, N, d) -> (..., N, h * d)."""
    r = x.ndim
    x = xp.permute_dims(x, (*range(r - 3), r - 2, r - 3, r - 1))  # (..., N, h, d)
    return xp.reshape(x, (*x.shape[:-2], x.shape[-2] * x.shape[-1]))  # (..., N, h*d)


def _append_key(xp: Any, k: Any, v: Any, bias_k: Any, bias_v: Any, zero: bool) -> tuple:
    """Append the learned key/value (``add_bias_kv``) and/or a zero key/value
    (``add_zero_attn``) at the end of the key axis: (..., Hkv, S, E) -> S + 1 or S + 2."""
    extra_k, extra_v = [], []
    if bias_k is not None:
        hkv = k.shape[-3]
        bk = xp.reshape(bias_k, (hkv, 1, k.shape[-1]))  # (Hkv, 1, E)
        bv = xp.reshape(bias_v, (hkv, 1, v.shape[-1]))  # (Hkv, 1, Ev)
        extra_k.append(xp.broadcast_to(bk, (*k.shape[:-2], 1, k.shape[-1])))
        extra_v.append(xp.broadcast_to(bv, (*v.shape[:-2], 1, v.shape[-1])))
    if zero:
        extra_k.append(xp.zeros((*k.shape[:-2], 1, k.shape[-1]), dtype=k.dtype, device=_device(k)))
        extra_v.append(xp.zeros((*v.shape[:-2], 1, v.shape[-1]), dtype=v.dtype, device=_device(v)))
    if not extra_k:
        return k, v
    return xp.concat([k, *extra_k], axis=-2), xp.concat([v, *extra_v], axis=-2)


def multi_head_attention(
    query: Any,
    key: Any = None,
    value: Any = None,
    params: MultiHeadParams | None = None,
    *,
    num_heads: int,
    num_kv_heads: int | None = None,
    key_padding_mask: Any = None,
    attn_mask: Any = None,
    is_causal: bool = False,
    causal_alignment: str = "top_left",
    window: Any = None,
    dropout_p: float = 0.0,
    rng: Any = None,
    need_weights: bool = False,
    average_weights: bool = True,
    add_zero_attn: bool = False,
    rope: Rope | None = None,
    positions: Any = None,
    kv_positions: Any = None,
    cache: KVCache | None = None,
    scale: float | None = None,
    impl: str = "auto",
) -> MultiHeadOutput:
    r"""Multi-head attention: project, split heads, attend, merge heads, project.

    Args:
        query: (..., L, Dq).
        key: (..., S, Dk); None for self-attention (``key = query``).
        value: (..., S, Dv); None means ``value = key``.
        params: a :class:`MultiHeadParams` (see :func:`attnkit.init_multi_head_params`).
        num_heads: Hq. ``num_kv_heads``: Hkv (default Hq); Hq % Hkv == 0.
        key_padding_mask: (..., S) bool (True = a real key that may be attended) or
            float added to the scores; with a cache, (..., T) over the cache's slots.
        attn_mask: bool (True = may attend) or additive float, broadcastable to
            (..., Hq, L, S), or an :mod:`attnkit.masks` mask.
        is_causal, causal_alignment, window: as :func:`attnkit.scaled_dot_product_attention`;
            with a cache they use absolute positions (the cache's length).
        dropout_p, rng: dropout on the attention weights (rng required when > 0).
        need_weights: also return the weights; ``average_weights`` averages over heads.
        add_zero_attn: append a zero key and value (PyTorch's ``add_zero_attn``).
        rope: an :class:`attnkit.Rope` to rotate queries and keys after projection.
        positions: the queries' positions for RoPE and for causal/window alignment: an
            int offset, a 0-d integer array, or an integer array (..., L); default 0, or
            the cache's length when decoding with a cache.
        kv_positions: the keys' positions; default ``positions`` for self-attention
            (``key is None``), else 0.
        cache: a :class:`attnkit.KVCache` for incremental self-attention decoding: the
            new keys/values are written at slots ``length ..`` and the queries attend
            over the filled slots. RoPE positions default to the cache's length.
        scale: score scale, default 1/sqrt(E). ``impl``: as the core.

    Returns:
        :class:`MultiHeadOutput` ``(output (..., L, Do), weights or None, cache or None)``.

    Plain formula (Hq = Hkv, no cache, no extras)::

        q = heads(query @ Wq.T + bq); k = heads(key @ Wk.T + bk); v = heads(value @ Wv.T + bv)
        o = softmax(q @ k.mT * scale + mask) @ v                # per head, (..., H, L, Ev)
        output = merge_heads(o) @ Wo.T + bo
    """
    check_call(
        query,
        key,
        value,
        cache,
        {"need_weights": need_weights, "average_weights": average_weights, "is_causal": is_causal},
        {"positions": positions, "kv_positions": kv_positions},
    )
    self_attention = key is None
    key_name = "key" if key is not None else "query"  # messages name what the caller passed
    value_name = "value" if value is not None else key_name
    key = query if key is None else key
    value = key if value is None else value
    shapes = check_inputs(
        query,
        key,
        value,
        params,
        num_heads,
        num_kv_heads,
        cache,
        add_zero_attn,
        rope,
        key_name=key_name,
        value_name=value_name,
    )
    Hq, Hkv = shapes.num_heads, shapes.num_kv_heads
    n_extra = (params.bias_k is not None) + bool(add_zero_attn)
    S = cache.max_length if cache is not None else key.shape[-2] + n_extra  # keys attended
    check_masks(attn_mask, key_padding_mask, n_extra, S, query, shapes)
    xp = array_namespace(query, key, value)
    p = params
    q = _heads(xp, _linear(xp, query, p.q_weight, p.q_bias), Hq)  # (..., Hq, L, E)
    k = _heads(xp, _linear(xp, key, p.k_weight, p.k_bias), Hkv)  # (..., Hkv, S, E)
    v = _heads(xp, _linear(xp, value, p.v_weight, p.v_bias), Hkv)  # (..., Hkv, S, Ev)
    if positions is None:
        positions = 0 if cache is None else cache.length
    if kv_positions is None:
        kv_positions = positions if self_attention or cache is not None else 0
    if rope is not None:
        q = apply_rope(q, positions, rope)
        k = apply_rope(k, kv_positions, rope)
    k, v = _append_key(xp, k, v, p.bias_k, p.bias_v, add_zero_attn)  # S -> S + n_extra
    length = None
    if cache is not None:
        length = cache.length
        cache = append_kv(cache, k, v)
        k, v = cache.key, cache.value  # (..., Hkv, T, E), (..., Hkv, T, Ev)
    mask = combine_masks(xp, attn_mask, key_padding_mask, n_extra, k.shape[-2])  # S keys
    core_causal, core_window = is_causal, window
    q_offset = positions if isinstance(positions, int) else 0
    kv_offset = kv_positions if isinstance(kv_positions, int) else 0
    if cache is not None:
        left_right = None if window is None else window_sides(window)
        slots = cache_mask(
            length,
            q.shape[-2],
            k.shape[-2],
            is_causal=is_causal,
            window=left_right,
            xp=xp,
            device=_device(query),
        )  # (L, T)
        mask = slots if mask is None else and_mask(xp, mask, slots)
        core_causal, core_window, q_offset, kv_offset = False, None, 0, 0
    result = scaled_dot_product_attention(
        q,
        k,
        v,
        mask,
        dropout_p,
        core_causal,
        scale,
        Hq != Hkv,
        causal_alignment=causal_alignment,
        window=core_window,
        return_weights=need_weights,
        q_offset=q_offset,
        kv_offset=kv_offset,
        rng=rng,
        impl=impl,
    )
    out, weights = (result.output, result.weights) if need_weights else (result, None)
    out = _linear(xp, _merge_heads(xp, out), p.out_weight, p.out_bias)  # (..., L, Do)
    if weights is not None and average_weights:
        weights = xp.mean(weights, axis=-3)  # (..., L, S)
    return MultiHeadOutput(out, weights, cache)
