"""Translators between attnkit's masks and FlexAttention's ``mask_mod`` and ``BlockMask``.

A ``mask_mod(b, h, q_idx, kv_idx) -> bool`` is True where the query may attend, as in
attnkit. The causal rule, windows and offsets become index arithmetic (so
``create_block_mask`` skips blocks); a bool array or an ``attnkit.masks`` mask becomes a
lookup in its dense form. The other way, any ``mask_mod`` or ``BlockMask`` becomes
``attnkit.masks.dense`` of what it allows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import array_api_compat.torch as xp_torch
import torch
from torch.nn.attention.flex_attention import create_block_mask, create_mask

from .. import masks
from ..masks import window_sides

__all__ = ["from_block_mask", "from_mask_mod", "to_block_mask", "to_mask_mod"]

MaskMod = Callable[[Any, Any, Any, Any], Any]


def _dense(
    attn_mask: Any, B: int | None, H: int | None, L: int, S: int, offsets: tuple[int, int]
) -> Any:
    if isinstance(attn_mask, masks.Mask):
        attn_mask = attn_mask.materialize(xp_torch, L, S, q_offset=offsets[0], kv_offset=offsets[1])
    m = torch.as_tensor(attn_mask)
    if m.dtype != torch.bool:
        raise TypeError(
            f"a mask_mod is a bool relation: got a {m.dtype} attn_mask; pass an additive mask "
            "as a score_mod instead (score + bias[b, h, q_idx, kv_idx])."
        )
    m = m.reshape((1,) * (4 - m.ndim) + tuple(m.shape))  # (B|1, H|1, L|1, S|1)
    return m.expand(B or m.shape[0], H or m.shape[1], L, S)


def to_mask_mod(
    attn_mask: Any = None,
    *,
    is_causal: bool = False,
    causal_alignment: str = "top_left",
    window: Any = None,
    q_offset: int = 0,
    kv_offset: int = 0,
    L: int,
    S: int,
    B: int | None = None,
    H: int | None = None,
) -> MaskMod | None:
    """attnkit's call (``attn_mask`` a bool array broadcastable to (B, H, L, S) or an
    ``attnkit.masks`` mask; the causal rule, ``window``, offsets) as one ``mask_mod``;
    None when the call masks nothing."""
    shift = S - L if causal_alignment == "bottom_right" else 0
    left, right = window_sides(window) if window is not None else (None, None)
    keep = None if attn_mask is None else _dense(attn_mask, B, H, L, S, (q_offset, kv_offset))
    if not is_causal and window is None and keep is None:
        return None

    def mask_mod(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        qpos = q_idx + (q_offset + shift)
        kpos = kv_idx + kv_offset
        allowed = kpos >= kpos  # all True, shaped like the indices
        if is_causal:
            allowed = allowed & (kpos <= qpos)
        if left is not None:
            allowed = allowed & (kpos >= qpos - left)
        if right is not None:
            allowed = allowed & (kpos <= qpos + right)
        if keep is not None:
            allowed = allowed & keep[b, h, q_idx, kv_idx]
        return allowed

    return mask_mod


def to_block_mask(
    B: int | None, H: int | None, L: int, S: int, device: str = "cpu", **call: Any
) -> Any:
    """attnkit's call (the keyword arguments of :func:`to_mask_mod`) as a ``BlockMask``
    for (B, H, L, S) (None: broadcast over that axis), or None when nothing is masked."""
    mask_mod = to_mask_mod(L=L, S=S, B=B, H=H, **call)
    if mask_mod is None:
        return None
    return create_block_mask(mask_mod, B, H, L, S, device=device)


def from_mask_mod(mask_mod: MaskMod, B: int, H: int, L: int, S: int) -> masks.Mask:
    """What ``mask_mod`` allows on (B, H, L, S), as ``attnkit.masks.dense`` (a bool
    tensor (B, H, L, S))."""
    dense = create_mask(mask_mod, B, H, L, S, device="cpu")  # (B, H, L, S)
    return masks.dense(dense)


def from_block_mask(block_mask: Any) -> masks.Mask:
    """What a ``BlockMask`` allows (its ``mask_mod`` on its shape), as
    ``attnkit.masks.dense``."""
    B, H, L, S = block_mask.shape
    return from_mask_mod(block_mask.mask_mod, B or 1, H or 1, L, S)
