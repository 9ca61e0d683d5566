"""``dot_product_attention``: a drop-in for ``jax.nn.dot_product_attention`` over attnkit.

Same signature, layout and arguments as ``jax.nn.dot_product_attention``: query
(B, T, N, H) or (T, N, H), key and value (B, S, K, H) with N % K == 0 (GQA from the
shapes), ``bias`` and ``mask`` (bool) together, broadcastable to (B, N, T, S);
``is_causal`` (top-left), ``query_seq_lengths`` / ``key_value_seq_lengths`` (B,),
``local_window_size``, ``scale``, ``return_residual`` (the row log-sum-exp (B, T, N), in
the inputs' dtype, no gradient through it).
Underneath is :func:`attnkit.scaled_dot_product_attention`, so attnkit's semantics hold;
where they differ from jax.nn: the table below.

Shape legend: B batch, T query length, S key length, N query heads, K key/value heads,
H head size.

Example and differences
-----------------------

.. code-block:: python

    import jax
    from attnkit.backends.jax import dot_product_attention  # in place of jax.nn's

    q = jax.random.normal(jax.random.key(0), (2, 128, 8, 64))  # (B, T, N, H)
    kv = jax.random.normal(jax.random.key(1), (2, 128, 2, 64))  # (B, S, K, H): GQA
    lengths = jax.numpy.array([128, 70])
    out = dot_product_attention(q, kv, kv, is_causal=True, key_value_seq_lengths=lengths)

| | `jax.nn.dot_product_attention` | attnkit's drop-in |
|---|---|---|
| a row with no key to attend (a window or mask leaving nothing) | the mean of the values (residual about -2.4e38) | 0 (residual -inf) |
| a query row beyond `query_seq_lengths` | 0 (residual about -2.4e38) | 0 (residual -inf) |
| float64 inputs (`jax_enable_x64`) | computed at float32 precision | float64 throughout |
| value head size | must equal the key's | any (B, S, K, Hv) |
| NaN or inf in masked keys or values | may reach the output | never |
| `implementation="cudnn"` | cuDNN's kernel | refused (attnkit computes; `None` and `"xla"` accepted) |
| keys beyond `key_value_seq_lengths` alone | a dense mask | a structured mask (key blocks past the length never read) |

"""  # noqa: E501

from __future__ import annotations

import math
from typing import Any

import attnkit as ak
from attnkit import masks
from attnkit.errors import DTypeError, ParameterError, ShapeError

__all__ = ["dot_product_attention"]


def dot_product_attention(
    query: Any,
    key: Any,
    value: Any,
    bias: Any = None,
    mask: Any = None,
    *,
    scale: float | None = None,
    is_causal: bool = False,
    query_seq_lengths: Any = None,
    key_value_seq_lengths: Any = None,
    local_window_size: int | tuple[int, int] | None = None,
    implementation: str | None = None,
    return_residual: bool = False,
) -> Any:
    """``jax.nn.dot_product_attention``'s call, computed by attnkit (module docstring).

    Returns the output (B, T, N, H) (or (T, N, H)), and with ``return_residual`` the pair
    ``(output, log-sum-exp (B, T, N))``: the residual in the key's dtype and, as in
    jax.nn, under ``jax.lax.stop_gradient``."""
    import jax
    import jax.numpy as jnp

    if implementation not in (None, "xla"):
        raise ParameterError(
            f"implementation={implementation!r}: attnkit computes the attention itself (XLA "
            "under jax.jit) and never calls cuDNN; pass None or 'xla', or call "
            "jax.nn.dot_product_attention for its cuDNN kernel."
        )
    query, key, value = (jnp.asarray(x) for x in (query, key, value))
    batched = _check_layout(query, key, value)
    window = _window(local_window_size)
    # (B, T, N, H) -> (B, N, T, H): attnkit's (..., heads, length, features)
    q, k, v = (jnp.swapaxes(x, -3, -2) for x in (query, key, value))
    attn_mask = _mask(bias, mask, query_seq_lengths, key_value_seq_lengths, q, k, batched)
    result = ak.scaled_dot_product_attention(
        q,
        k,
        v,
        attn_mask,
        is_causal=is_causal,
        scale=scale,
        enable_gqa=q.shape[-3] != k.shape[-3],
        causal_alignment="top_left",
        window=window,
        return_lse=return_residual,
    )
    out = result.output if return_residual else result  # (B, N, T, Hv)
    out = jnp.swapaxes(out, -3, -2)  # (B, T, N, Hv)
    if not return_residual:
        return out
    # As jax.nn: the residual in the inputs' dtype, and no gradient through it (issue 26).
    lse = jax.lax.stop_gradient(result.lse.astype(key.dtype))  # (B, N, T)
    return out, jnp.swapaxes(lse, -2, -1)  # (B, N, T) -> (B, T, N)


def _check_layout(query: Any, key: Any, value: Any) -> bool:
    """jax.nn's layout: (B, T, N, H) or (T, N, H), key/value alike; True when batched."""
    shapes = f"query {query.shape}, key {key.shape}, value {value.shape}"
    if query.ndim not in (3, 4) or key.ndim != query.ndim or value.ndim != query.ndim:
        raise ShapeError(
            f"dot_product_attention takes query (B, T, N, H) or (T, N, H) and key/value of "
            f"the same rank, (B, S, K, H) or (S, K, H); got {shapes}. (attnkit's own "
            "scaled_dot_product_attention takes (..., N, T, H).)"
        )
    n, kh = query.shape[-2], key.shape[-2]
    if value.shape[-3:-1] != key.shape[-3:-1] or kh == 0 or n % kh:
        raise ShapeError(
            f"dot_product_attention needs key and value with the same S and K, and the "
            f"query heads N a multiple of K (GQA); got {shapes}, layout (B, T, N, H)."
        )
    if query.shape[-1] != key.shape[-1]:
        raise ShapeError(f"query and key must have the same head size H (last axis); got {shapes}.")
    return query.ndim == 4


def _window(size: Any) -> tuple[int, int] | None:
    if size is None:
        return None
    if isinstance(size, int) and not isinstance(size, bool):
        size = (size, size)
    if (
        isinstance(size, (tuple, list))
        and len(size) == 2
        and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in size)
    ):
        return (int(size[0]), int(size[1]))
    raise ParameterError(
        f"local_window_size must be an int >= 0 or a pair (left, right) of them, got {size!r}."
    )


def _mask(
    bias: Any, mask: Any, q_lengths: Any, kv_lengths: Any, q: Any, k: Any, batched: bool
) -> Any:
    """One attn_mask for attnkit from jax.nn's bias, mask and sequence lengths: None, a
    structured key_padding, a bool (True = may attend) or an additive float array."""
    import jax.numpy as jnp

    bias, mask = _as_4d(bias, "bias", batched), _as_4d(mask, "mask", batched)
    for name, a in (("query_seq_lengths", q_lengths), ("key_value_seq_lengths", kv_lengths)):
        if a is not None and (not batched or jnp.ndim(a) != 1 or jnp.shape(a)[0] != q.shape[0]):
            raise ShapeError(
                f"{name} must have shape (B,) = ({q.shape[0] if batched else 'B'},) with "
                f"batched (B, T, N, H) inputs, got shape {jnp.shape(a)}."
            )
    keep = mask
    if kv_lengths is not None and bias is None and keep is None and q_lengths is None:
        return masks.key_padding(jnp.asarray(kv_lengths, dtype=jnp.int32))
    T, S = q.shape[-2], k.shape[-2]
    if q_lengths is not None:  # (B, 1, T, 1): rows past the length attend nothing
        rows = jnp.arange(T)[None, :] < jnp.asarray(q_lengths)[:, None]
        keep = _and(keep, rows[:, None, :, None])
    if kv_lengths is not None:  # (B, 1, 1, S)
        cols = jnp.arange(S)[None, :] < jnp.asarray(kv_lengths)[:, None]
        keep = _and(keep, cols[:, None, None, :])
    if bias is None:
        return keep
    # The bias stays in the compute dtype (float32 for 16-bit inputs), as jax.nn adds it to
    # float32 logits: cast to float16, a -1e9 bias would become -inf (issue 26).
    bias = bias.astype(jnp.promote_types(q.dtype, jnp.float32))
    return bias if keep is None else jnp.where(keep, bias, -math.inf)


def _as_4d(a: Any, name: str, batched: bool) -> Any:
    """bias or mask as jax.nn reads it: any rank up to 4, leading axes of size 1 added, so
    broadcastable to (B, N, T, S); with unbatched (T, N, H) inputs the batch axis must be 1
    and is dropped, (N, T, S)."""
    import jax.numpy as jnp

    if a is None:
        return None
    a = jnp.asarray(a)
    if name == "mask" and a.dtype != jnp.bool_:
        raise DTypeError(
            f"mask must be bool (True = may attend), as in jax.nn.dot_product_attention, got "
            f"dtype {a.dtype} (shape {a.shape}); casting it would invert an additive "
            "0/-inf mask. Pass a bool mask, or pass an additive float mask as bias=."
        )
    if a.ndim > 4:
        raise ShapeError(
            f"{name} must have at most 4 axes, broadcastable to (B, N, T, S), got shape {a.shape}."
        )
    a = jnp.reshape(a, (1,) * (4 - a.ndim) + a.shape)  # (B|1, N|1, T|1, S|1)
    if batched:
        return a
    if a.shape[0] != 1:
        raise ShapeError(
            f"{name} has batch axis {a.shape[0]} (shape {a.shape} as (B, N, T, S)) but the "
            f"inputs are unbatched (T, N, H): pass {name} as (N, T, S) or batch the inputs."
        )
    return a[0]  # (N|1, T|1, S|1)


def _and(a: Any, b: Any) -> Any:
    return b if a is None else a & b
