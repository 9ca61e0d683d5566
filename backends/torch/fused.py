"""PyTorch's fused ``F.scaled_dot_product_attention`` as attnkit's ``impl="auto"`` path.

Used only where its semantics equal attnkit's exactly (the conformance matrix runs
``impl="auto"`` on every case to prove it): no dropout (SDPA draws from the global
generator, attnkit from an explicit one), no weights or lse requested, no window, causal
only when the diagonal sits at position 0 of both (top-left with equal offsets) and
without a mask, no zero-length axis. Fully masked rows give 0 in both (torch >= 2.5).
Keys that no query may attend are zeroed first, as the generic path does.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from attnkit import masks
from attnkit.dense import zero_dead_keys

__all__ = ["block_attention", "fused_attention", "supported"]

_SUPPORTED: list[bool] = []


def supported() -> bool:
    """torch >= 2.5: older releases give NaN on fully masked rows and lack enable_gqa."""
    if not _SUPPORTED:
        version = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
        _SUPPORTED.append(version >= (2, 5))
    return _SUPPORTED[0]


def fused_attention(p: Any) -> Any:
    """The output (..., Hq, L, Ev) in the inputs' dtype, or None where SDPA does not apply."""
    if p.dropout_p > 0 or p.score_mod is not None or p.L == 0 or p.S == 0:
        return None
    causal = _plain_causal(p)
    if p.structure is not None and not causal:
        return None  # windows and structured masks: the generic path skips their blocks
    if causal and p.mask is not None:
        return None
    q, k, v, mask = p.query, p.key, p.value, p.mask
    if mask is not None:  # the generic path's guard, in the GQA layout it was written for
        allowed = mask if mask.dtype == torch.bool else mask != -torch.inf
        k, v = zero_dead_keys(p.xp, k, v, allowed)
    if p.gqa_groups > 1:  # back from (..., Hkv, G, L, E) to (..., Hq, L, E); SDPA groups itself
        hkv, groups = q.shape[-4], q.shape[-3]
        q = q.reshape(*q.shape[:-4], hkv * groups, *q.shape[-2:])
        k, v = k.squeeze(-3), v.squeeze(-3)
        if mask is not None:
            mask = _merge_head_axes(mask, hkv, groups)
    if mask is not None and mask.dtype != torch.bool and mask.dtype != q.dtype:
        mask = mask.to(q.dtype)
    batch = -3 if p.gqa_groups > 1 else -2  # with GQA the head axes differ by design
    if k.shape[:-2] != v.shape[:-2] or q.shape[:batch] != k.shape[:batch]:
        return None  # leave broadcasting leading dims to the generic path
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=causal, scale=p.scale, enable_gqa=p.gqa_groups > 1
    )


def _merge_head_axes(mask: Any, hkv: int, groups: int) -> Any:
    """A mask in the GQA layout (..., Hkv|1, G|1, L, S), or of lower rank, as
    (..., Hq|1, L, S) for SDPA's own grouping."""
    if mask.ndim < 4:
        mask = mask.reshape((1,) * (4 - mask.ndim) + tuple(mask.shape))
    lead, (a, b), tail = mask.shape[:-4], mask.shape[-4:-2], mask.shape[-2:]
    if a == 1 and b == 1:
        return mask.squeeze(-3)  # (..., 1, L, S)
    return mask.expand(*lead, hkv, groups, *tail).reshape(*lead, hkv * groups, *tail)


def _plain_causal(p: Any) -> bool:
    """Whether the structure is exactly SDPA's is_causal: key j <= query i, diagonal at 0."""
    s, g = p.structure, p.geometry
    if s is None or (masks.causal("top_left") != s and masks.causal("bottom_right") != s):
        return False
    shift = g.S - g.L if s == masks.causal("bottom_right") else 0
    return g.q_offset + shift == g.kv_offset


def block_attention(q: Any, k: Any, v: Any, mask: Any, scale: float) -> Any:
    """SDPA on one block: q (..., Bq, E), k (..., Sk, E), v (..., Sk, Ev), mask bool
    (True = may attend), additive float or None. None where leading dims differ (SDPA's
    fast kernels do not broadcast them).

    SDPA turns a bool mask into an additive one on every call; the executor passes the
    same mask object for every interior block of a window (its tiles are cached), so the
    additive form of the last bool mask seen is kept and reused.
    """
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-2] != v.shape[:-2]:
        return None
    if mask is not None and mask.dtype == torch.bool:
        mask = _additive(mask, q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


_LAST_MASK: list[tuple[Any, int, Any, Any]] = []  # [(bool mask, version, dtype, additive)]


def _additive(mask: Any, dtype: Any) -> Any:
    """0 where ``mask`` is True, -inf elsewhere, in ``dtype``; reused for the same mask
    object while it is unmodified (its version counter counts in-place writes)."""
    if _LAST_MASK:
        last, version, last_dtype, additive = _LAST_MASK[0]
        if last is mask and version == mask._version and last_dtype == dtype:
            return additive
    additive = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    additive.masked_fill_(~mask, -torch.inf)
    _LAST_MASK[:] = [(mask, mask._version, dtype, additive)]
    return additive
