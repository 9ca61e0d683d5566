"""Dropout on attention weights, drawn from the caller's explicit generator.

attnkit keeps no random state of its own: the keep pattern comes from the backend of
the inputs' namespace (``dropout_keep``), drawing from the ``rng`` the caller passed.
"""

from __future__ import annotations

from typing import Any

from .problem import Problem

__all__ = ["apply_dropout", "keep_pattern"]


def keep_pattern(p: Problem, weights: Any, stream: int) -> tuple[Any, float]:
    """(keep, keep_prob): the bool keep pattern of ``weights``' shape drawn for block
    ``stream`` (the forward and a backward pass with a replayed rng draw the same)."""
    keep_prob = 1.0 - p.dropout_p
    keep = p.backend.dropout_keep(
        p.rng, tuple(weights.shape), keep_prob, like=weights, stream=stream
    )
    return keep, keep_prob


def apply_dropout(p: Problem, weights: Any, stream: int) -> Any:
    """``weights`` with dropout applied: each kept with probability 1 - p and scaled by
    1 / (1 - p), the rest 0. ``stream`` numbers the draws of one call (one per block)."""
    keep, keep_prob = keep_pattern(p, weights, stream)
    return p.xp.where(keep, weights / keep_prob, 0.0)
