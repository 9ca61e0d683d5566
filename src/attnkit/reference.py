"""The plain full-matrix formula (``impl="reference"``), kept for reading and checking.

This is the textbook attention with the fixes every real implementation needs: masked
positions are excluded with ``where`` (so NaN or inf scores there cannot leak), a row
with nothing to attend gives 0 instead of NaN, and 16-bit inputs are computed in
float32. It materializes the whole (..., L, S) score matrix: fine for teaching and
verification, not for long sequences (use the default blocked executor)::

    scores  = (query @ key^T) * scale + additive_mask     # (..., L, S)
    allowed = structure & bool_mask                      # causal, window, attnkit.masks
    weights = softmax(where(allowed, scores, -inf))       # 0 on empty rows
    out     = dropout(weights) @ value                    # (..., L, Ev)
"""

from __future__ import annotations

from typing import Any

from ._validate import Problem
from .dense import allowed_in_tile, apply_dropout, neutralize, prepare_operands
from .masks import Tile
from .score_mods import apply_score_mod
from .softmax import masked_softmax

__all__ = ["reference_attention"]


def reference_attention(p: Problem) -> tuple[Any, Any, Any]:
    """(out (..., L, Ev), weights (..., L, S), lse (..., L)) in the compute dtype."""
    xp = p.xp
    ops = prepare_operands(p)  # compute dtype
    tile = Tile(xp, p.device, p.geometry, 0, p.L, [(0, p.S)])
    allowed = allowed_in_tile(p, ops, tile) if p.S and p.L else None  # (..., L, S) or None
    q, k, v = ops.query, ops.key, ops.value
    if allowed is not None and not ops.finite:  # unused rows and columns zeroed
        q, k, v = neutralize(xp, q, k, v, allowed)
    scores = (q * p.scale) @ xp.matrix_transpose(k)  # (..., L, S)
    if p.score_mod is not None:
        scores = apply_score_mod(p.score_mod, xp, scores, tile, p.num_heads, p.gqa_groups)
    if ops.additive is not None:
        scores = scores + ops.additive
    weights, lse = masked_softmax(xp, scores, allowed)  # (..., L, S), (..., L)
    if p.dropout_p > 0:
        weights = apply_dropout(p, weights, stream=0)
    out = weights @ v  # (..., L, Ev)
    return out, weights, lse
