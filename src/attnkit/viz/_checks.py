"""Input checks shared by :mod:`attnkit.viz`: weights arrays, stacks of layers, tokens.

Every public function of ``attnkit.viz`` validates here, before any work, and raises the
typed attnkit errors with the shape, the expectation and the fix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import array_api_compat as aac

from ..errors import (
    ArgumentTypeError,
    DTypeError,
    NamespaceMismatchError,
    ParameterError,
    ShapeError,
)
from ..shapes import describe, type_name

__all__ = ["as_array", "check_choice", "check_tokens", "squeeze_to"]


def _namespace(name: str, x: Any) -> Any:
    if not aac.is_array_api_obj(x):
        raise ArgumentTypeError(
            f"{name} must be an array (NumPy, PyTorch, JAX or any array-API array) or a "
            f"list of per-layer arrays, got {type_name(x)}; convert it first, e.g. "
            f"numpy.asarray({name})."
        )
    xp = aac.array_namespace(x)
    if not xp.isdtype(x.dtype, "real floating"):
        raise DTypeError(
            f"{name} must hold real floating-point attention weights, got {describe(x)}; "
            f"cast it, e.g. {name}.astype('float32')."
        )
    return xp


def as_array(name: str, weights: Any) -> tuple[Any, Any]:
    """``(xp, array)``: ``weights`` itself, or a sequence of per-layer arrays stacked.

    A list or tuple of N arrays of one shape ``(..., H, L, S)`` (what Hugging Face
    ``output_attentions`` returns) becomes one array ``(..., N, H, L, S)``.
    """
    if isinstance(weights, (list, tuple)):
        if not weights:
            raise ShapeError(f"{name} is an empty sequence; pass at least one layer's weights.")
        namespaces = [_namespace(f"{name}[{i}]", w) for i, w in enumerate(weights)]
        xp = namespaces[0]
        for i, (w, other) in enumerate(zip(weights, namespaces, strict=True)):
            if other is not xp:
                raise NamespaceMismatchError(
                    f"{name}[{i}] is a {type_name(w)} but {name}[0] is a "
                    f"{type_name(weights[0])}; pass every layer from one array library."
                )
            if tuple(w.shape) != tuple(weights[0].shape):
                raise ShapeError(
                    f"{name}[{i}] has shape {tuple(w.shape)} but {name}[0] has "
                    f"{tuple(weights[0].shape)}; every layer must have the same "
                    "(..., heads, L, S) shape to be stacked."
                )
        if weights[0].ndim < 3:
            raise ShapeError(
                f"{name} is a sequence of layers, each of which must have shape "
                f"(..., heads, L, S), but {name}[0] is {describe(weights[0])}; give each "
                "layer a head axis (e.g. w[None] for one head)."
            )
        return xp, xp.stack(list(weights), axis=-4)  # (..., N, H, L, S)
    return _namespace(name, weights), weights


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


def check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ParameterError(
            f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}."
        )
    return value


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
