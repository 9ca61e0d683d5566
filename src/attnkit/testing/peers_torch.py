"""PyTorch's attention functions seen through attnkit's call, for
:func:`attnkit.testing.check_attention` (named by :mod:`attnkit.testing.frameworks`).

Each takes attnkit's (B, Hq, L, E) tensors and keyword arguments, passes them on under the
framework's own names, and raises :class:`~attnkit.testing.Unsupported` for a call the
framework cannot express: ``sdpa`` (``F.scaled_dot_product_attention``),
``multihead_attention`` (``F.multi_head_attention_forward`` with identity projections:
Hkv == Hq, Ev == E, the default scale, L and S >= 1) and ``flex_attention`` (eager; masks
as a ``mask_mod`` through ``create_block_mask``, additive masks and ``softcap`` as a
``score_mod``).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
import torch.nn.functional as F

from .adapters import declare
from .frameworks import by_key
from .run import Unsupported
from .translate_torch import to_mask_mod

__all__ = ["flex_attention", "multihead_attention", "sdpa"]


sdpa = declare(F.scaled_dot_product_attention, **by_key("torch_sdpa").options())


def _multihead_attention(query: Any, key: Any, value: Any, attn_mask: Any = None) -> Any:
    B, H, L, E = query.shape
    S = key.shape[-2]
    if key.shape[-3] != H or value.shape[-3] != H or value.shape[-1] != E:
        raise Unsupported("MultiheadAttention has one head count and one head size")
    if L == 0 or S == 0:
        raise Unsupported("MultiheadAttention needs L and S >= 1")
    D = H * E
    # (B, H, N, E) -> (N, B, H*E): the module's (length, batch, embed_dim) layout
    q, k, v = (t.permute(2, 0, 1, 3).reshape(t.shape[2], B, D) for t in (query, key, value))
    eye = torch.eye(D, dtype=q.dtype, device=q.device)
    mask = None
    if attn_mask is not None:  # handed over as it is: the module's own polarity applies
        mask = attn_mask.expand(B, H, L, S).reshape(B * H, L, S)  # (B*H, L, S)
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
        need_weights=True,  # the module's default: its own softmax, not SDPA
        attn_mask=mask,
        use_separate_proj_weight=True,
        q_proj_weight=eye,
        k_proj_weight=eye,
        v_proj_weight=eye,
    )  # (L, B, D)
    return out.reshape(L, B, H, E).permute(1, 2, 0, 3)  # (B, H, L, E)


multihead_attention = declare(_multihead_attention, **by_key("torch_mha").options())


def _flex_attention(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    causal_alignment: str = "top_left",
    window: Any = None,
    q_offset: int = 0,
    kv_offset: int = 0,
    softcap: float | None = None,
) -> Any:
    from torch.nn.attention.flex_attention import create_block_mask
    from torch.nn.attention.flex_attention import flex_attention as flex

    B, H, L, _ = query.shape
    S = key.shape[-2]
    if L == 0 or S == 0:
        raise Unsupported("flex_attention needs L and S >= 1")
    bias = None
    if attn_mask is not None and attn_mask.dtype != torch.bool:
        bias, attn_mask = attn_mask.expand(B, H, L, S), None
    mask_mod = to_mask_mod(
        attn_mask,
        is_causal=is_causal,
        causal_alignment=causal_alignment,
        window=window,
        q_offset=q_offset,
        kv_offset=kv_offset,
        L=L,
        S=S,
        B=B,
        H=H,
    )
    options: dict[str, Any] = {"scale": scale, "enable_gqa": enable_gqa}
    if mask_mod is not None:
        options["block_mask"] = create_block_mask(mask_mod, B, H, L, S, device=str(query.device))

    def score_mod(score: Any, b: Any, h: Any, i: Any, j: Any) -> Any:
        if bias is not None:
            score = score + bias[b, h, i, j]
        if softcap is not None:
            score = softcap * torch.tanh(score / softcap)
        return score

    if bias is not None or softcap is not None:
        options["score_mod"] = score_mod
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "flex_attention called without torch.compile()"
        return flex(query, key, value, **options)


flex_attention = declare(_flex_attention, **by_key("flex").options())
