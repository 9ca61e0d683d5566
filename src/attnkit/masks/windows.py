"""Masks by relative position: causal and sliding windows (query i sees keys i-left ..
i+right), which any offset describes and whose tiles the executor reuses.

With ``alignment="bottom_right"`` query row i sits at position ``i + S - L``: the last
query sees the last key (FlashAttention, kv-cache decoding). L = 3, S = 5::

    causal("top_left")     causal("bottom_right")
    x . . . .              x x x . .
    x x . . .              x x x x .
    x x x . .              x x x x x
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..checks import check_alignment, is_int
from ..errors import ParameterError
from .algebra import Mask
from .geometry import EMPTY, FULL, PARTIAL, Geometry, Ranges, Tile

__all__ = ["causal", "sliding_window", "window_sides"]


def _shift(g: Geometry, alignment: str) -> int:
    return g.S - g.L if alignment == "bottom_right" else 0


@dataclass(frozen=True)
class _Window(Mask):
    """qpos - left <= kpos <= qpos + right (None = unbounded side); causal is (None, 0)."""

    left: int | None
    right: int | None
    alignment: str = "top_left"
    translation_invariant = True  # class attributes, not fields
    banded = True

    def key_ranges(self, g: Geometry, q_lo: int, q_hi: int) -> Ranges:
        q_min = g.q_offset + _shift(g, self.alignment) + q_lo
        q_max = q_min + (q_hi - q_lo) - 1
        lo = 0 if self.left is None else max(0, q_min - self.left - g.kv_offset)
        hi = g.S if self.right is None else min(g.S, q_max + self.right - g.kv_offset + 1)
        return [(lo, hi)] if hi > lo else []

    def tile_kind(self, g: Geometry, q_lo: int, q_hi: int, k_lo: int, k_hi: int) -> int:
        q_min = g.q_offset + _shift(g, self.alignment) + q_lo
        q_max = q_min + (q_hi - q_lo) - 1
        k_min, k_max = g.kv_offset + k_lo, g.kv_offset + k_hi - 1
        if (self.left is not None and k_max < q_min - self.left) or (
            self.right is not None and k_min > q_max + self.right
        ):
            return EMPTY
        left_ok = self.left is None or k_min >= q_max - self.left
        right_ok = self.right is None or k_max <= q_min + self.right
        return FULL if left_ok and right_ok else PARTIAL

    def tile(self, t: Tile) -> Any:
        g = t.geometry
        span = t.span()  # static bounds (None in a loop: both sides are tested)
        need_left, need_right = self.left is not None, self.right is not None
        if span is not None:
            q_lo, q_hi, k_lo, k_hi = span
            q_min = g.q_offset + _shift(g, self.alignment) + q_lo
            q_max = q_min + (q_hi - q_lo) - 1
            k_min, k_max = g.kv_offset + k_lo, g.kv_offset + k_hi - 1
            need_left = need_left and k_min < q_max - self.left
            need_right = need_right and k_max > q_min + self.right
        if not (need_left or need_right):
            return None
        # kpos - qpos = (k_index - q_index) + c with c a Python int: local indices stay
        # small, so huge offsets never overflow a 32-bit index (JAX without x64)
        c = g.kv_offset - (g.q_offset + _shift(g, self.alignment))
        qi, kj = t.q_index, t.k_index  # (Bq, 1), (1, Sk) local indices
        out = None
        if need_left:  # kpos >= qpos - left
            out = kj >= qi + _clamp(-self.left - c)
        if need_right:  # kpos <= qpos + right
            right = kj <= qi + _clamp(self.right - c)
            out = right if out is None else out & right
        return out

    def check(self, xp: Any, device: Any, g: Geometry, name: str) -> None:
        return None  # relative positions only: any offset works


def _clamp(bound: int) -> int:
    """A bound on a difference of local indices (each below 2**30) clamped to +-2**30: the
    comparison's result is unchanged and q_index + bound fits a 32-bit index."""
    return max(-(2**30), min(2**30, bound))


def causal(alignment: str = "top_left") -> Mask:
    """Key position <= query position (``bottom_right``: the last query sees the last key)."""
    return _Window(None, 0, check_alignment(alignment, "alignment"))


def window_sides(window: Any) -> tuple[int | None, int | None]:
    """``(left, right)`` from an int W (meaning (W, W)) or a pair; None = unbounded side."""
    sides = (window, window) if is_int(window) else window
    if not (isinstance(sides, tuple | list) and len(sides) == 2):
        raise ParameterError(
            f"window must be None, an int W (meaning (W, W)) or a pair (left, right), got "
            f"{window!r}; query i then sees keys i-left .. i+right."
        )
    for side_name, side in zip(("left", "right"), sides, strict=True):
        if side is not None and (not is_int(side) or side < 0):
            raise ParameterError(
                f"window {side_name} side must be a non-negative int or None (unbounded), got "
                f"{side!r} in window={window!r}; for FlashAttention's -1 pass None."
            )
    return (
        None if sides[0] is None else int(sides[0]),
        None if sides[1] is None else int(sides[1]),
    )


def sliding_window(
    window: int | tuple[int | None, int | None], alignment: str = "top_left"
) -> Mask:
    """Query i sees keys i-left .. i+right; an int W means (W, W); None = unbounded side.

    ``sliding_window((W, 0))`` is a causal window of W previous keys plus the current one.
    """
    left, right = window_sides(window)
    return _Window(left, right, check_alignment(alignment, "alignment"))
