"""PyTorch's own attention functions on NumPy arrays, in a chosen dtype: what
``attnkit verify`` compares with the float64 oracle.

Each takes query (B, H, L, E), key (B, Hkv, S, E), value (B, Hkv, S, Ev) as NumPy
float64 arrays (rounded here to ``dtype``) and a mask broadcastable to (B, H, L, S) (bool,
True = may attend, or additive float; or None), and returns the output (B, H, L, Ev) as
NumPy float64. A call a function cannot express raises :class:`NotExpressible`; anything
the framework raises propagates. :func:`sdpa` is ``F.scaled_dot_product_attention``;
:func:`multihead` is ``nn.MultiheadAttention``'s computation with identity projections
(Hkv == H, Ev == E, the default scale); :func:`flex` is ``flex_attention`` in eager mode.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["NotExpressible", "flex", "multihead", "sdpa"]


class NotExpressible(ValueError):
    """The call has no equivalent in this function (not a difference of the framework)."""


def _tensors(dtype: str, *arrays: Any) -> list[Any]:
    import numpy as np
    import torch

    kind = getattr(torch, dtype)
    out = []
    for a in arrays:
        if a is None:
            out.append(None)
            continue
        a = np.ascontiguousarray(a)
        t = torch.from_numpy(a if a.flags.writeable else a.copy())  # torch needs writable
        out.append(t if t.dtype == torch.bool else t.to(kind))
    return out


def _numpy(t: Any) -> Any:
    import torch

    return t.detach().to(torch.float64).numpy()


def sdpa(
    query: Any,
    key: Any,
    value: Any,
    mask: Any = None,
    *,
    dtype: str = "float64",
    is_causal: bool = False,
    scale: float | None = None,
) -> Any:
    """``F.scaled_dot_product_attention`` in ``dtype``."""
    import torch.nn.functional as F

    q, k, v, m = _tensors(dtype, query, key, value, mask)
    options: dict[str, Any] = {"scale": scale} if scale is not None else {}
    if q.shape[-3] != k.shape[-3]:
        options["enable_gqa"] = True
    return _numpy(
        F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=is_causal, **options)
    )


def multihead(
    query: Any,
    key: Any,
    value: Any,
    mask: Any = None,
    *,
    dtype: str = "float64",
    scale: float | None = None,
) -> Any:
    """``torch.nn.MultiheadAttention``'s forward with identity projections in ``dtype``."""
    import torch
    import torch.nn.functional as F

    B, H, L, E = query.shape
    S, Ev = key.shape[-2], value.shape[-1]
    if key.shape[-3] != H or Ev != E:
        raise NotExpressible("MultiheadAttention has one head count and one head size")
    if scale is not None and not math.isclose(scale, 1 / math.sqrt(E)):
        raise NotExpressible("MultiheadAttention scales by 1/sqrt(E) only")
    if L == 0 or S == 0:
        raise NotExpressible("MultiheadAttention needs L, S >= 1")
    q, k, v, m = _tensors(dtype, query, key, value, mask)
    D = H * E
    # (B, H, N, E) -> (N, B, H*E): the module's (length, batch, embed_dim) layout
    q, k, v = (t.permute(2, 0, 1, 3).reshape(t.shape[2], B, D) for t in (q, k, v))
    eye = torch.eye(D, dtype=q.dtype)
    attn_mask = None
    if m is not None:
        m = m.expand(B, H, L, S).reshape(B * H, L, S)  # (B*H, L, S), as the module takes
        attn_mask = ~m if m.dtype == torch.bool else m  # torch: True = NOT allowed
    out, _ = F.multi_head_attention_forward(
        q,
        k,
        v,
        D,
        H,
        None,
        None,
        None,
        None,
        False,
        0.0,
        eye,
        None,
        training=False,
        need_weights=True,  # the module's default: its softmax, not SDPA
        attn_mask=attn_mask,
        use_separate_proj_weight=True,
        q_proj_weight=eye,
        k_proj_weight=eye,
        v_proj_weight=eye,
    )  # (L, B, D)
    return _numpy(out.reshape(L, B, H, E).permute(1, 2, 0, 3))  # (B, H, L, E)


def flex(
    query: Any,
    key: Any,
    value: Any,
    mask: Any = None,
    *,
    dtype: str = "float64",
    scale: float | None = None,
) -> Any:
    """``flex_attention`` run eagerly in ``dtype``."""
    import warnings

    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    B, H, L, _ = query.shape
    S = key.shape[-2]
    if L == 0 or S == 0:
        raise NotExpressible("flex_attention needs L, S >= 1")
    q, k, v, m = _tensors(dtype, query, key, value, mask)
    options: dict[str, Any] = {"scale": scale, "enable_gqa": q.shape[-3] != k.shape[-3]}
    if m is not None and m.dtype.is_floating_point:
        bias = m.expand(B, H, L, S)
        options["score_mod"] = lambda score, b, h, i, j: score + bias[b, h, i, j]
    elif m is not None:
        keep = m.expand(B, H, L, S)
        options["block_mask"] = create_block_mask(
            lambda b, h, i, j: keep[b, h, i, j], B, H, L, S, device="cpu"
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "flex_attention called without torch.compile()"
        return _numpy(flex_attention(q, k, v, **options))
