"""Multi-head attention for JAX as pure functions: ``init`` and ``apply``.

Thin wrappers over :func:`attnkit.init_multi_head_params` and
:func:`attnkit.multi_head_attention`; the parameters are a pytree, so ``apply`` works
under ``jax.jit`` (int/bool options static), ``jax.grad`` and ``jax.vmap``::

    params = init(jax.random.key(0), 64, 8, num_kv_heads=2)
    step = jax.jit(functools.partial(apply, num_heads=8, num_kv_heads=2, is_causal=True))
    out = step(params, x).output                       # x (B, L, 64) -> (B, L, 64)
"""

from __future__ import annotations

from typing import Any

import attnkit as ak

__all__ = ["apply", "init", "init_cache"]


def init(key: Any, embed_dim: int, num_heads: int, **options: Any) -> ak.MultiHeadParams:
    """Parameters drawn with PyTorch's scheme from the JAX key ``key``; ``options`` as
    :func:`attnkit.init_multi_head_params` (num_kv_heads, kdim, vdim, head_dim, bias,
    add_bias_kv, dtype, device)."""
    return ak.init_multi_head_params(embed_dim, num_heads, rng=key, **options)


def apply(
    params: ak.MultiHeadParams,
    query: Any,
    key: Any = None,
    value: Any = None,
    **options: Any,
) -> ak.MultiHeadOutput:
    """``attnkit.multi_head_attention(query, key, value, params, **options)``: returns
    ``(output, weights or None, cache or None)``. Dropout needs ``rng=`` a JAX key."""
    return ak.multi_head_attention(query, key, value, params, **options)


def init_cache(
    batch_shape: tuple[int, ...],
    params: ak.MultiHeadParams,
    *,
    num_kv_heads: int,
    max_length: int,
) -> ak.KVCache:
    """An empty, preallocated :class:`attnkit.KVCache` for ``params``'s head sizes."""
    e = params.k_weight.shape[0] // num_kv_heads
    ev = params.v_weight.shape[0] // num_kv_heads
    return ak.init_kv_cache(batch_shape, num_kv_heads, max_length, e, ev, like=params.k_weight)
