"""The attention formula as written on paper: the file to read to learn attention.

::

    out = softmax(q kᵀ · scale + mask) v        q (..., L, E), k (..., S, E), v (..., S, Ev)

:func:`attention` is exactly this on arrays (NumPy, PyTorch, JAX: call it in a REPL), one
line per step. :func:`reference_attention` (``impl="reference"``) adapts a validated call
to it; what a real call adds is handled after it, one helper per concern:

- **dtypes**: 16-bit inputs are computed in float32 (:func:`_operands`).
- **GQA**: the query's heads are grouped as (Hkv, G), so key and value heads are never
  copied (:func:`attnkit.problem.gqa_layout`, called by :func:`_operands`).
- **masks**: ``attn_mask`` is bool (True = may attend) or additive float; causal
  attention (both alignments), windows, absolute ``q_offset``/``kv_offset`` and every
  :mod:`attnkit.masks` structure compare positions; both become one bool array of the
  allowed pairs (:func:`_allowed`). A masked pair is excluded with ``where``, never by
  adding -inf, so NaN or inf there cannot leak.
- **the NaN guard**: rows and columns a mask leaves unused are zeroed before the
  products, and the value product takes nothing from a masked value, so NaN or inf
  stored there cannot leak through 0 * NaN (:func:`_operands`,
  :func:`attnkit.nan_guard.weighted_values`).
- **score_mod**: applied to the scaled scores, before the mask (:func:`_modified`).
- **empty rows**: :func:`attnkit.softmax.masked_softmax` gives a row with nothing to
  attend weights 0 and lse -inf, never NaN, so its output is 0.
- **dropout**: applied to the weights, which are the weights returned (:func:`_dropout`).
- **weights and lse**: returned with the output; the caller keeps what was asked for.

It materializes the whole score matrix: fine for teaching and verification, not for long
sequences. The default path is :mod:`attnkit.blocked`, whose
:func:`attnkit.blocked.block.block_formula` is this formula on one block of query rows.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from array_api_compat import array_namespace

from .dropout import apply_dropout
from .masks import Tile
from .nan_guard import all_finite, allowed_pairs, neutralize, weighted_values
from .problem import Problem, gqa_layout
from .score_mods import apply_score_mod
from .softmax import masked_softmax

__all__ = ["attention", "attention_weights", "reference_attention"]


def attention(
    q: Any, k: Any, v: Any, *, allowed: Any = None, bias: Any = None, scale: float | None = None
) -> Any:
    """softmax(q kᵀ · scale + bias) v over the allowed keys: out (..., L, Ev); ``allowed``
    bool (True = may attend) and ``bias`` broadcastable to (..., L, S); scale 1/sqrt(E)
    by default. A row with no allowed key gives 0."""
    weights, _ = attention_weights(q, k, allowed=allowed, bias=bias, scale=scale)
    return weights @ v  # (..., L, S) @ (..., S, Ev) -> (..., L, Ev)


def attention_weights(
    q: Any,
    k: Any,
    *,
    allowed: Any = None,
    bias: Any = None,
    scale: float | None = None,
    score_mod: Any = None,
) -> tuple[Any, Any]:
    """:func:`attention`'s (weights (..., L, S), lse (..., L)); ``score_mod`` a function
    of the scaled scores, applied before ``bias``."""
    xp = array_namespace(q, k)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q * scale) @ xp.matrix_transpose(k)  # q kᵀ · scale    (..., L, S)
    if score_mod is not None:
        scores = score_mod(scores)
    if bias is not None:
        scores = scores + bias  # an additive mask
    return masked_softmax(xp, scores, allowed)  # 0 where not allowed and on empty rows


def reference_attention(p: Problem) -> tuple[Any, Any, Any]:
    """:func:`attention` on a validated call: (out (..., L, Ev), weights (..., L, S), lse
    (..., L)) in the compute dtype and the GQA layout (query heads as (Hkv, G))."""
    o = _operands(p)  # q, k, v in the compute dtype; the mask as allowed pairs
    mod = None if p.score_mod is None else (lambda scores: _modified(p, o, scores))
    weights, lse = attention_weights(
        o.q, o.k, allowed=o.allowed, bias=o.additive, scale=p.scale, score_mod=mod
    )
    weights = _dropout(p, weights)
    out = weights @ o.v if o.finite else weighted_values(p, weights, o.v)  # (..., L, Ev)
    return out, weights, lse


# The flags, one concern each, in the order the formula meets them.


class _Operands(NamedTuple):
    """What the formula reads: q (..., L, E), k (..., S, E), v (..., S, Ev) in the compute
    dtype and the GQA layout; the additive mask or None; the allowed pairs (..., L, S)
    (None: every pair); whether q, k, v are known to be finite; the tile of positions."""

    q: Any
    k: Any
    v: Any
    additive: Any
    allowed: Any
    finite: bool
    tile: Tile


def _operands(p: Problem) -> _Operands:
    """Dtypes and GQA (:func:`gqa_layout`), the mask as allowed pairs, and the NaN guard:
    where some pair is masked and the inputs are not known to be finite (a NaN or inf was
    found, or the values are traced), the rows and columns no pair uses are zeroed."""
    xp, cd = p.xp, p.compute_dtype
    q, k, v, mask = (
        x if x is None or x.dtype == cd or x.dtype == xp.bool else xp.astype(x, cd)
        for x in gqa_layout(p)
    )
    additive = None if mask is None or mask.dtype == xp.bool else mask
    tile = Tile(xp, p.device, p.geometry, 0, p.L, [(0, p.S)])  # every query and key
    allowed = _allowed(p, tile, mask, additive)  # (..., L, S) or None
    finite = allowed is None or bool(all_finite(p, q, k, v))
    if not finite:
        q, k, v = neutralize(xp, q, k, v, allowed)  # unused rows and columns zeroed
    return _Operands(q, k, v, additive, allowed, finite, tile)


def _allowed(p: Problem, tile: Tile, mask: Any, additive: Any) -> Any:
    """The allowed pairs (..., L, S), or None when every pair is: the structure's pairs
    (causal in either alignment, windows and :mod:`attnkit.masks`, by absolute position:
    ``q_offset + i`` against ``kv_offset + j``) AND the user's mask (bool: True = may
    attend; additive: wherever it is not -inf)."""
    user = mask if additive is None else additive != -math.inf  # bool (True = may attend)
    structure = p.structure.tile(tile) if p.structure is not None and p.L and p.S else None
    return allowed_pairs(p, tile, structure, user)


def _modified(p: Problem, o: _Operands, scores: Any) -> Any:
    """The scaled scores with ``score_mod`` applied (the additive mask comes after)."""
    return apply_score_mod(p.score_mod, p.xp, scores, o.tile, p.num_heads, p.gqa_groups)


def _dropout(p: Problem, weights: Any) -> Any:
    """The weights with dropout applied (``dropout_p > 0``), drawn from the call's rng."""
    if p.dropout_p > 0:
        weights = apply_dropout(p, weights, stream=0)
    return weights
