"""The plain full-matrix formula (``impl="reference"``), kept for reading and checking.

This is the textbook attention with the fixes every real implementation needs: masked
positions are excluded with ``where`` (so NaN or inf scores there cannot leak), rows and
columns a mask leaves unused are zeroed first (so NaN stored there cannot leak through
0 * NaN), a row with nothing to attend gives 0 instead of NaN, and 16-bit inputs are
computed in float32. It materializes the whole (..., L, S) score matrix: fine for
teaching and verification, not for long sequences (the default is :mod:`attnkit.blocked`).
"""

from __future__ import annotations

import math
from typing import Any

from ._problem import Problem, gqa_layout
from .dropout import apply_dropout
from .masked_operands import all_finite, allowed_pairs, neutralize, weighted_values
from .masks import Tile
from .score_mods import apply_score_mod
from .softmax import masked_softmax

__all__ = ["reference_attention"]


def reference_attention(p: Problem) -> tuple[Any, Any, Any]:
    """(out (..., L, Ev), weights (..., L, S), lse (..., L)) in the compute dtype and the
    GQA layout (query heads as (Hkv, G))."""
    xp, cd = p.xp, p.compute_dtype
    q, k, v, mask = (x if x is None or x.dtype == cd or x.dtype == xp.bool else xp.astype(x, cd)
                     for x in gqa_layout(p))  # fmt: skip
    additive = None if mask is None or mask.dtype == xp.bool else mask
    user = mask if additive is None else additive != -math.inf  # bool (True = may attend)
    tile = Tile(xp, p.device, p.geometry, 0, p.L, [(0, p.S)])  # every query and key
    structure = p.structure.tile(tile) if p.structure is not None and p.L and p.S else None
    allowed = allowed_pairs(p, tile, structure, user)  # (..., L, S) or None
    finite = allowed is None or bool(all_finite(p, q, k, v))
    if not finite:
        q, k, v = neutralize(xp, q, k, v, allowed)  # unused rows and columns zeroed
    scores = (q * p.scale) @ xp.matrix_transpose(k)  # (..., L, S)
    if p.score_mod is not None:
        scores = apply_score_mod(p.score_mod, xp, scores, tile, p.num_heads, p.gqa_groups)
    if additive is not None:
        scores = scores + additive
    weights, lse = masked_softmax(xp, scores, allowed)  # (..., L, S), (..., L)
    if p.dropout_p > 0:
        weights = apply_dropout(p, weights, stream=0)
    out = weights @ v if finite else weighted_values(p, weights, v)  # (..., L, Ev)
    return out, weights, lse
