"""The structure of a call: causal, window and structured masks as one Mask, checked.

``is_causal``, ``window`` and an :mod:`attnkit.masks` ``attn_mask`` (or a framework's mask
object, such as PyTorch's ``CausalBias``) combine by AND into one
:class:`attnkit.masks.Mask`, checked against the call before any work.
"""

from __future__ import annotations

from typing import Any

import array_api_compat as aac

from . import masks
from .errors import ArgumentTypeError, ShapeError
from .masks import Geometry, Mask
from .registry import backend_for
from .shapes import broadcast_shapes

__all__ = ["check_structure", "check_window", "foreign_mask", "structure_of"]


def foreign_mask(query: Any, attn_mask: Any) -> tuple[Any, tuple[int, int] | None]:
    """``attn_mask`` as the array checks and the structure expect: a framework's own mask
    object (PyTorch's ``CausalBias``) becomes an attnkit Mask through the query's backend,
    with the (L, S) it was built for; arrays of another type pass unchanged (the array
    checks judge them); anything else is refused."""
    converted = None
    if aac.is_array_api_obj(query):
        converted = backend_for(aac.array_namespace(query)).foreign_mask(attn_mask)
    if converted is not None:
        return converted
    if aac.is_array_api_obj(attn_mask):
        return attn_mask, None
    raise ArgumentTypeError(
        f"attn_mask must be an array (bool: True = may attend; or float, added to the "
        f"scores), an attnkit.masks mask or None, got {type(attn_mask).__name__}; convert it "
        "first, e.g. numpy.asarray(attn_mask)."
    )


def check_window(window: Any) -> Any:
    """None, an attnkit.masks mask (taken as it is), or (left, right) from an int or pair."""
    if window is None or isinstance(window, Mask):
        return window
    return masks.window_sides(window)


def structure_of(
    is_causal: bool,
    window: Any,
    alignment: str,
    attn_mask: Any,
    out_lead: tuple[int, ...],
    L: int,
    S: int,
) -> Mask | None:
    """causal & window & a structured ``attn_mask``, as one Mask (None when unstructured)."""
    parts: list[Mask] = []
    if is_causal:
        parts.append(masks.causal(alignment))
    if isinstance(window, Mask):
        parts.append(window)
    elif window is not None:
        parts.append(masks.sliding_window(window, alignment))
    if isinstance(attn_mask, Mask):
        target = (*out_lead, L, S)
        if broadcast_shapes((*attn_mask.lead, L, S), target) != target:
            raise ShapeError(
                f"attn_mask {attn_mask!r} carries leading dims {attn_mask.lead} that do not "
                f"broadcast to the attention shape (..., Hq, L, S) = {target}."
            )
        parts.append(attn_mask)
    if not parts:
        return None
    structure = parts[0]
    for part in parts[1:]:
        structure = structure & part
    return structure


def check_structure(
    xp: Any,
    device: Any,
    geometry: Geometry,
    window: Any,
    attn_mask: Any,
    score_mod: Any,
    sizes: tuple[int, int] | None,
) -> None:
    """Every mask checked against the call; a score modifier's absolute positions within
    the namespace's index range; a converted causal bias built for this (L, S)."""
    if sizes is not None and sizes != (geometry.L, geometry.S):
        raise ShapeError(
            f"attn_mask is a causal bias for (L, S) = {sizes} but the call has query length "
            f"L = {geometry.L} and key length S = {geometry.S}; build it for these lengths."
        )
    if isinstance(window, Mask):
        window.check(xp, device, geometry, "window")
    if isinstance(attn_mask, Mask):
        attn_mask.check(xp, device, geometry, "attn_mask")
    if score_mod is not None:  # it is given absolute positions (q_idx, kv_idx)
        masks.check_position_range(xp, device, geometry, "score_mod", score_mod)
