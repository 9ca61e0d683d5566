"""What the approximate attentions share: input checks, key padding, safe division.

:func:`prepare` checks the inputs before any array work and returns the operands in the
compute dtype with padded keys and values replaced by 0 through ``where``, so NaN stored
in padding cannot leak. The key padding convention: :mod:`attnkit.approx`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import array_api_compat as aac

from .. import masks
from ..array_checks import check_arrays as _check_arrays
from ..array_checks import check_shapes as _check_shapes
from ..checks import check_scale
from ..errors import (
    ArgumentTypeError,
    DeviceMismatchError,
    DTypeError,
    NamespaceMismatchError,
    ShapeError,
)
from ..shapes import broadcast_shapes, describe

__all__ = [
    "Operands",
    "check_side_array",
    "prepare",
    "safe_divide",
]


@dataclass(frozen=True)
class Operands:
    """Validated inputs of one approximate-attention call, in the compute dtype."""

    xp: Any
    device: Any
    dtype: Any  # the inputs' dtype, also the output's
    compute_dtype: Any
    query: Any  # (..., L, E)
    key: Any  # (..., S, E), 0 at padded keys
    value: Any  # (..., S, Ev), 0 at padded keys
    alive: Any  # bool (..., S) True = key may be attended, or None (no padding)
    lead: tuple[int, ...]  # broadcast leading dims of query, key and value, (..., H)
    L: int
    S: int
    E: int
    Ev: int
    scale: float

    def finish(self, out: Any) -> Any:
        """``out`` (..., L, Ev) back in the inputs' dtype, broadcast to (*lead, L, Ev)."""
        xp = self.xp
        if out.dtype != self.dtype:
            out = xp.astype(out, self.dtype)
        target = (*self.lead, self.L, self.Ev)
        return out if tuple(out.shape) == target else xp.broadcast_to(out, target)


def check_side_array(
    name: str, x: Any, query: Any, xp: Any, device: Any, *, floating: bool
) -> None:
    """``x`` must be an array of query's library and device; real floating of query's
    dtype when ``floating`` (projections, features), bool otherwise (masks)."""
    if not aac.is_array_api_obj(x):
        raise ArgumentTypeError(
            f"{name} must be an array of the same library as query, got {type(x).__name__}; "
            f"convert it first (e.g. with the library's asarray)."
        )
    if type(x) is not type(query) and aac.array_namespace(x) is not xp:
        raise NamespaceMismatchError(
            f"{name} comes from {type(x).__module__}.{type(x).__name__} but query from "
            f"{type(query).__module__}.{type(query).__name__}; convert {name} to query's "
            "array type."
        )
    if floating and x.dtype != query.dtype:
        raise DTypeError(
            f"{name} is {describe(x)} but query is {describe(query)}; cast {name} to "
            f"{query.dtype} (it must share query's dtype)."
        )
    if not floating and x.dtype != xp.bool:
        raise DTypeError(
            f"{name} has dtype {x.dtype} ({describe(x)}); expected bool (True = this key may "
            f"be attended): for a 0/1 array pass {name} != 0, for lengths use "
            "attnkit.masks.key_padding(lengths)."
        )
    other = aac.device(x)
    if device is not None and other is not None and other != device:
        raise DeviceMismatchError(
            f"{name} is on device {other} but query is on {device}; move {name} to query's device."
        )


def _key_alive(mask: Any, query: Any, xp: Any, device: Any, lead: tuple[int, ...], S: int) -> Any:
    """The key padding mask as bool (..., S) (True = key may be attended), or None."""
    if mask is None:
        return None
    if isinstance(mask, masks.Mask):
        if not mask.keys_only:
            raise ArgumentTypeError(
                f"key_padding_mask accepts attnkit.masks.key_padding(lengths) among the "
                f"structured masks, got {mask!r}; approximate attention has no causal or "
                "window structure (Performer has causal=True)."
            )
        alive = mask.key_alive(xp, device, masks.Geometry(1, S))  # (B, 1, 1, S)
        alive = alive[..., 0, :]  # (B, 1, S)
        shape = (*mask.lead, S)
    else:
        check_side_array("key_padding_mask", mask, query, xp, device, floating=False)
        alive, shape = mask, tuple(mask.shape)
    target = (*lead, S)
    if broadcast_shapes(shape, target) != target:
        raise ShapeError(
            f"key_padding_mask of shape {shape} does not broadcast to (..., H, S) = {target}; "
            f"give it S = {S} on its last axis and leading dims equal to the inputs' or 1 "
            "(a per-batch mask (B, S) needs a head axis: key_padding_mask[:, None, :])."
        )
    return alive


def prepare(query: Any, key: Any, value: Any, key_padding_mask: Any, scale: Any) -> Operands:
    """Validate one call (before any work) and return its :class:`Operands`."""
    xp, device = _check_arrays(query, key, value, None)
    _, lead = _check_shapes(query, key, value, False)
    L, E = query.shape[-2], query.shape[-1]
    S, Ev = key.shape[-2], value.shape[-1]
    scale = check_scale(scale, E)
    alive = _key_alive(key_padding_mask, query, xp, device, lead, S)
    dtype = query.dtype
    compute = dtype if dtype in (xp.float32, xp.float64) else xp.float32
    q, k, v = (x if x.dtype == compute else xp.astype(x, compute) for x in (query, key, value))
    if alive is not None:
        k = xp.where(alive[..., None], k, 0.0)  # (..., S, E): NaN in padding cannot leak
        v = xp.where(alive[..., None], v, 0.0)  # (..., S, Ev)
    return Operands(xp, device, dtype, compute, q, k, v, alive, lead, L, S, E, Ev, scale)


def safe_divide(xp: Any, num: Any, den: Any) -> Any:
    """``num / den`` where ``den > 0``, else 0 (rows with nothing to attend), never NaN.

    The inner ``where`` keeps the gradient finite on those rows too."""
    positive = den > 0
    return xp.where(positive, num / xp.where(positive, den, 1.0), 0.0)
