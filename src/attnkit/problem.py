"""The validated description of one attention call, and the grouped-query layout.

Validation (:mod:`attnkit.call_checks`) turns the caller's arguments into a
:class:`Problem`; the executors (:mod:`attnkit.blocked`, :mod:`attnkit.reference`) work
from it. Its arrays are the caller's, in the caller's layout; the executors regroup the
query heads for GQA themselves (:func:`gqa_layout`), so a backend's whole-call kernel
receives exactly what the caller passed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Problem", "caller_layout", "gqa_layout", "gqa_mask"]


@dataclass(slots=True)  # not frozen: frozen dataclasses cost microseconds per call
class Problem:
    """A validated attention call.

    query (..., Hq, L, E), key (..., Hkv, S, E), value (..., Hkv, S, Ev) as the caller
    passed them; ``mask`` None or an array broadcastable to (..., Hq, L, S) of rank >= 2
    (bool True = may attend, or additive float); ``out_lead`` the output's leading dims
    (..., Hq); ``structure`` the causal, window and structured-mask rules as one
    :class:`attnkit.masks.Mask` (or None); ``gqa_groups`` G = Hq // Hkv (1 without GQA).
    """

    xp: Any
    device: Any
    backend: Any  # attnkit.backends.Backend of the namespace
    dtype: Any  # the inputs' dtype, also the output's
    compute_dtype: Any  # float32 for float16/bfloat16 inputs, else the input dtype
    query: Any
    key: Any
    value: Any
    mask: Any
    mask_is_bool: bool
    out_lead: tuple[int, ...]
    L: int
    S: int
    Ev: int
    scale: float
    structure: Any  # attnkit.masks.Mask or None
    geometry: Any  # attnkit.masks.Geometry: L, S, q_offset, kv_offset
    dropout_p: float
    rng: Any
    gqa_groups: int
    score_mod: Any  # None or f(scores, q_idx, kv_idx, head) -> scores
    num_heads: int  # Hq (1 for inputs without a head axis)
    impl: str
    need_weights: bool
    need_lse: bool
    block_size: int | None


def gqa_mask(xp: Any, mask: Any, groups: int) -> Any:
    """A mask (..., Hq|1, L|1, S|1) in the GQA layout (..., Hkv|1, G|1, L|1, S|1)."""
    if mask.ndim < 3:
        return mask  # no head axis: broadcasts over (Hkv, G) as it is
    *m_batch, m_heads, m_rows, m_cols = mask.shape
    if m_heads == 1:
        return xp.expand_dims(mask, axis=-3)  # (..., 1, 1, L|1, S|1)
    return xp.reshape(mask, (*m_batch, m_heads // groups, groups, m_rows, m_cols))


def gqa_layout(p: Problem) -> tuple[Any, Any, Any, Any]:
    """(query, key, value, mask) for the executors: with GQA (G > 1) the query heads split
    into (Hkv, G) and key/value get a size-1 group axis, so that every query head of a
    group meets its key/value head by broadcasting, never by copying::

        query (..., Hkv, G, L, E)   key (..., Hkv, 1, S, E)   value (..., Hkv, 1, S, Ev)
        mask  (..., Hkv|1, G|1, L|1, S|1)
    """
    if p.gqa_groups == 1:
        return p.query, p.key, p.value, p.mask
    xp, groups = p.xp, p.gqa_groups
    *q_batch, q_heads, L, E = p.query.shape
    query = xp.reshape(p.query, (*q_batch, q_heads // groups, groups, L, E))  # (..., Hkv, G, L, E)
    key = xp.expand_dims(p.key, axis=-3)  # (..., Hkv, 1, S, E)
    value = xp.expand_dims(p.value, axis=-3)  # (..., Hkv, 1, S, Ev)
    mask = None if p.mask is None else gqa_mask(xp, p.mask, groups)
    return query, key, value, mask


def caller_layout(p: Problem, x: Any, tail: tuple[int, ...], dtype: Any) -> Any:
    """``x`` (..., [Hkv, G,] *tail) in ``dtype`` as (*out_lead, *tail): GQA's (Hkv, G)
    merged into Hq, then leading dims that an operand broadcast expanded (a value with
    more leading dims than the scores, say)."""
    xp = p.xp
    if x.dtype != dtype:
        x = xp.astype(x, dtype)
    target = (*p.out_lead, *tail)
    if tuple(x.shape) != target and p.gqa_groups > 1:
        n = len(tail) + 2
        hkv, groups = x.shape[-n], x.shape[-n + 1]
        x = xp.reshape(x, (*x.shape[:-n], hkv * groups, *tail))  # (..., Hq, *tail)
    if tuple(x.shape) != target:
        x = xp.broadcast_to(x, target)
    return x
