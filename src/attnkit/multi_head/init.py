"""Parameter initialization for multi-head attention, PyTorch's scheme on every backend.

As ``torch.nn.MultiheadAttention._reset_parameters``: input projections Xavier uniform,
``U(-a, a)`` with ``a = sqrt(6 / (fan_in + fan_out))`` (over the packed ((Hq + 2 Hkv) E, D)
matrix when query, key and value share D); the output projection
``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``; biases zero; ``bias_k`` / ``bias_v`` Xavier
normal. Drawn from the backend of ``rng``: the same seed gives the same parameters.
"""

from __future__ import annotations

import math
from typing import Any

from ..checks import check_flag
from ..errors import ParameterError
from ..registry import backend_for_rng, backend_named
from .params import MultiHeadParams, check_heads

__all__ = ["init_multi_head_params"]


def _positive(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ParameterError(f"{name} must be a positive int, got {v!r}.")
    return v


def init_multi_head_params(
    embed_dim: int,
    num_heads: int,
    *,
    rng: Any,
    num_kv_heads: int | None = None,
    kdim: int | None = None,
    vdim: int | None = None,
    head_dim: int | None = None,
    bias: bool = True,
    add_bias_kv: bool = False,
    dtype: Any = None,
    device: Any = None,
    backend: str | None = None,
) -> MultiHeadParams:
    """Fresh parameters for :func:`attnkit.multi_head_attention`, drawn like PyTorch.

    Args:
        embed_dim: D, the query features and the output features.
        num_heads: Hq; ``num_kv_heads`` Hkv (default Hq) must divide it.
        rng: a NumPy ``Generator``, a ``torch.Generator`` or a JAX key; it picks the
            backend (pass ``backend="strict"`` for array-api-strict with a NumPy Generator).
        kdim, vdim: key and value input features (default ``embed_dim``).
        head_dim: E (default ``embed_dim // num_heads``, which must then divide).
        bias: input and output projection biases (zeros). ``add_bias_kv``: draw
            ``bias_k`` and ``bias_v``.
        dtype: the backend's dtype object (default float32). ``device``: where to put them.

    Returns:
        :class:`MultiHeadParams` with q/k/v weights (Hq*E, D), (Hkv*E, kdim),
        (Hkv*E, vdim) and ``out_weight`` (D, Hq*E).
    """
    embed_dim = _positive("embed_dim", embed_dim)
    check_flag("bias", bias)
    check_flag("add_bias_kv", add_bias_kv)
    hq, hkv = check_heads(num_heads, num_kv_heads)
    kdim = embed_dim if kdim is None else _positive("kdim", kdim)
    vdim = embed_dim if vdim is None else _positive("vdim", vdim)
    if head_dim is None:
        if embed_dim % hq:
            raise ParameterError(
                f"embed_dim={embed_dim} is not divisible by num_heads={hq}; pick num_heads "
                "dividing embed_dim or give head_dim explicitly."
            )
        head_dim = embed_dim // hq
    e = _positive("head_dim", head_dim)
    adapter = backend_for_rng(rng) if backend is None else backend_named(backend)
    adapter.check_rng(rng)
    xp = adapter.namespace()
    dtype = xp.float32 if dtype is None else dtype
    keys = iter(adapter.split_rng(rng, 6))

    def uniform(shape: tuple[int, int], bound: float) -> Any:
        return adapter.uniform(next(keys), shape, -bound, bound, dtype=dtype, device=device)

    def xavier(rows: int, cols: int) -> float:
        return math.sqrt(6.0 / (rows + cols))

    rq, rk = hq * e, hkv * e
    if kdim == vdim == embed_dim:  # PyTorch's packed in_proj_weight: one Xavier bound
        packed = uniform((rq + 2 * rk, embed_dim), xavier(rq + 2 * rk, embed_dim))
        qw, kw, vw = packed[:rq, :], packed[rq : rq + rk, :], packed[rq + rk :, :]
    else:
        qw = uniform((rq, embed_dim), xavier(rq, embed_dim))
        kw = uniform((rk, kdim), xavier(rk, kdim))
        vw = uniform((rk, vdim), xavier(rk, vdim))
    ow = uniform((embed_dim, rq), 1.0 / math.sqrt(rq))

    def zeros(n: int) -> Any:
        return xp.zeros((n,), dtype=dtype, device=device) if bias else None

    bias_k = bias_v = None
    if add_bias_kv:
        std = math.sqrt(1.0 / rk)
        bias_k = adapter.normal(next(keys), (rk,), dtype=dtype, device=device) * std
        bias_v = adapter.normal(next(keys), (rk,), dtype=dtype, device=device) * std
    return MultiHeadParams(
        qw, kw, vw, ow, zeros(rq), zeros(rk), zeros(rk), zeros(embed_dim), bias_k, bias_v
    )
