"""Input checks shared by :mod:`attnkit.viz`: weights arrays, stacks of layers, tokens.

Every public function validates here, before any work, with the typed attnkit errors;
the weights' checks are the math's (:func:`attnkit.rollout.as_weights`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from attnkit.checks import check_choice
from attnkit.errors import ArgumentTypeError, ShapeError
from attnkit.rollout import as_weights
from attnkit.shapes import describe, type_name

__all__ = ["as_weights", "check_choice", "check_tokens", "squeeze_to"]


def squeeze_to(name: str, xp: Any, x: Any, rank: int, what: str, fix: str) -> Any:
    """``x`` with leading axes of size 1 dropped until it has ``rank`` axes."""
    if x.ndim < rank:
        raise ShapeError(f"{name} must have shape {what}, got {describe(x)}; {fix}")
    extra = x.shape[: x.ndim - rank]
    if any(size != 1 for size in extra):
        raise ShapeError(
            f"{name} must have shape {what} (leading axes of size 1 are dropped), got "
            f"{describe(x)}; {fix}"
        )
    return xp.reshape(x, tuple(x.shape[x.ndim - rank :]))


def check_tokens(name: str, tokens: Any, length: int, axis: str) -> list[str]:
    """``tokens`` as a list of ``length`` strings; None gives the positions ``0 .. n-1``."""
    if tokens is None:
        return [str(i) for i in range(length)]
    if isinstance(tokens, str) or not isinstance(tokens, Sequence):
        raise ArgumentTypeError(
            f"{name} must be a list of strings (one per position), got {type_name(tokens)}."
        )
    if len(tokens) != length:
        raise ShapeError(
            f"{name} has {len(tokens)} entries but the weights have {length} {axis}; "
            f"pass one token per position (or {name}=None for the position numbers)."
        )
    return [str(t) for t in tokens]
