"""Rotary position embeddings (RoPE, Su et al. 2021), written once against the array API.

Shape legend: ``...`` leading dims, H heads, L positions, E features per head, R the
rotated features (``rotary_dim``, even, <= E; the others pass through unchanged).

Feature f of the rotated ones is turned by ``position * base ** (-2 f / R)``, paired with
f + R/2 (``interleaved=False``: GPT-NeoX, Llama in Hugging Face;
``rotate(x) = x * cos + rotate_half(x) * sin``) or 2f with 2f + 1 (``interleaved=True``:
RoFormer, GPT-J). Either way ``rope(q, m) . rope(k, n)`` depends only on ``m - n``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from array_api_compat import array_namespace
from array_api_compat import device as _device

from .errors import DTypeError, ParameterError, ShapeError
from .shapes import broadcast_shapes as _broadcast
from .shapes import describe

__all__ = ["Rope", "apply_rope", "check_positions"]


@dataclass(frozen=True)
class Rope:
    """How to rotate queries and keys: ``Rope(base=10000.0, interleaved=False, rotary_dim=None)``.

    ``rotary_dim`` None rotates every feature; an even R < E rotates the first R only
    (partial rotary, as GPT-NeoX's ``rotary_pct``). Hashable, so it can be a static
    argument under ``jax.jit``.
    """

    base: float = 10000.0
    interleaved: bool = False
    rotary_dim: int | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.base, (int, float)) and math.isfinite(self.base)):
            raise ParameterError(f"Rope base must be a finite number > 1, got {self.base!r}.")
        if self.base <= 1:
            raise ParameterError(f"Rope base must be > 1 (10000 is usual), got {self.base!r}.")
        if not isinstance(self.interleaved, bool):
            raise ParameterError(
                f"Rope interleaved must be True or False, got {self.interleaved!r}."
            )
        r = self.rotary_dim
        if r is not None and (isinstance(r, bool) or not isinstance(r, int) or r < 2 or r % 2):
            raise ParameterError(
                f"Rope rotary_dim must be None (all features) or an even int >= 2, got {r!r}."
            )


def _dims(rope: Rope, x: Any) -> int:
    E = x.shape[-1]
    R = E if rope.rotary_dim is None else rope.rotary_dim
    if R > E or R % 2:
        raise ShapeError(
            f"Rope rotates {R} features but the input has {E} on its last axis "
            f"(shape {tuple(x.shape)}); rotary_dim must be even and <= {E}"
            + (" (E is odd: set rotary_dim to an even number below it)." if E % 2 else ".")
        )
    return R


def check_positions(name: str, positions: Any) -> None:
    """``positions`` must be a Python int offset or an integer array (absolute positions are
    whole numbers): a float, a bool or a floating array is refused, naming ``name``."""
    if isinstance(positions, int) and not isinstance(positions, bool):
        return
    if hasattr(positions, "dtype") and hasattr(positions, "shape"):
        xp = array_namespace(positions)
        if not xp.isdtype(positions.dtype, "integral"):
            raise DTypeError(
                f"{name} has dtype {positions.dtype} ({describe(positions)}); positions are "
                f"whole numbers: pass an integer array (e.g. {name}.astype(int32)), or a "
                "Python int offset."
            )
        return
    if isinstance(positions, list | tuple):
        return  # converted with xp.asarray; its dtype is checked then
    raise ParameterError(
        f"{name} must be a Python int offset (rows are offset, offset + 1, ...) or an integer "
        f"array of positions, got {type(positions).__name__} {positions!r}; positions are whole "
        f"numbers, pass int({name}) or an integer array."
    )


def apply_rope(x: Any, positions: Any = 0, rope: Rope | None = None) -> Any:
    """Rotate ``x`` (..., L, E) by its positions: RoPE.

    Args:
        x: (..., L, E) queries or keys, heads anywhere in ``...`` (usually (..., H, L, E)).
        positions: the absolute position of each of the L rows: an int offset (rows are
            ``offset, offset + 1, ...``), a 0-d integer array (traced under ``jax.jit``,
            e.g. a kv cache's length), or an integer array broadcastable to (..., L) of
            explicit positions (left padding, packed sequences).
        rope: a :class:`Rope`; default ``Rope()`` (base 10000, half-split, all features).

    Returns:
        (..., L, E) in ``x``'s dtype; the angles are computed in float32 for 16-bit
        inputs and in ``x``'s dtype otherwise.

    Plain formula (half-split, R = E)::

        inv_freq = base ** (-arange(0, R, 2) / R)             # (R/2,)
        theta = positions[..., None] * inv_freq               # (..., L, R/2)
        cos, sin = cos(concat([theta, theta])), sin(concat([theta, theta]))
        out = x * cos + concat([-x[..., R/2:], x[..., :R/2]]) * sin
    """
    rope = Rope() if rope is None else rope
    if not isinstance(rope, Rope):
        raise ParameterError(f"rope must be an attnkit.Rope, got {type(rope).__name__}.")
    check_positions("positions", positions)
    xp = array_namespace(x)
    if x.ndim < 2:
        raise ShapeError(
            f"apply_rope needs x of rank >= 2 (..., L, E), got shape {tuple(x.shape)}."
        )
    R = _dims(rope, x)
    L = x.shape[-2]
    # (not `x.dtype in (...)`: NumPy's dtype compares equal to None, meaning float64)
    low = any(
        d is not None and x.dtype == d
        for d in (getattr(xp, "float16", None), getattr(xp, "bfloat16", None))
    )
    cdt = xp.float32 if low else x.dtype
    device = _device(x)
    half = R // 2
    inv_freq = rope.base ** (-(xp.arange(half, dtype=cdt, device=device) * 2) / R)  # (R/2,)
    if isinstance(positions, int) and not isinstance(positions, bool):
        pos = xp.arange(L, dtype=cdt, device=device) + positions  # (L,)
    else:
        pos = xp.asarray(positions, device=device)
        check_positions("positions", pos)  # a list of floats becomes a floating array
        if pos.ndim == 0:
            pos = xp.arange(L, dtype=cdt, device=device) + xp.astype(pos, cdt)  # (L,)
        elif pos.shape[-1] not in (1, L) or _broadcast(pos.shape, x.shape[:-1]) is None:
            raise ShapeError(
                f"positions has shape {tuple(pos.shape)} but x has L={L} rows "
                f"(shape {tuple(x.shape)}); give one position per row, of a shape that "
                f"broadcasts to {tuple(x.shape[:-1])}."
            )
        else:
            pos = xp.astype(pos, cdt)
    theta = pos[..., None] * inv_freq  # (..., L, R/2)
    cos, sin = xp.cos(theta), xp.sin(theta)
    xr = xp.astype(x[..., :R], cdt)
    if rope.interleaved:
        lead = xr.shape[:-1]
        pairs = xp.reshape(xr, (*lead, half, 2))  # (..., L, R/2, 2)
        a, b = pairs[..., 0], pairs[..., 1]
        rot = xp.stack([a * cos - b * sin, a * sin + b * cos], axis=-1)  # (..., L, R/2, 2)
        rot = xp.reshape(rot, (*rot.shape[:-2], R))  # (..., L, R)
    else:
        a, b = xr[..., :half], xr[..., half:]
        rot = xp.concat([a * cos - b * sin, b * cos + a * sin], axis=-1)  # (..., L, R)
    rot = xp.astype(rot, x.dtype)
    if R == x.shape[-1]:
        return rot
    rest = x[..., R:]
    if rot.shape[:-1] != rest.shape[:-1]:  # positions broadcast against x's leading dims
        lead = _broadcast(rot.shape[:-1], rest.shape[:-1])
        rot = xp.broadcast_to(rot, (*lead, R))
        rest = xp.broadcast_to(rest, (*lead, x.shape[-1] - R))
    return xp.concat([rot, rest], axis=-1)  # (..., L, E)
