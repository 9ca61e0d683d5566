"""Where one attention call sits: its lengths and offsets, the tiles the executor asks a
mask about, and the key ranges (half-open ``[lo, hi)`` column intervals) masks return.

Positions are absolute: query row i sits at ``q_offset + i (+ S - L for bottom_right)``
and key column j at ``kv_offset + j``. Ranges are static Python ints, local to the call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..compiling import lazy_attribute  # traceable by torch.compile

__all__ = [
    "Geometry",
    "Ranges",
    "Tile",
    "clip_ranges",
    "intersect_ranges",
    "merge_ranges",
]


Ranges = list[tuple[int, int]]


@dataclass(slots=True)  # built on every call: a frozen dataclass costs microseconds more
class Geometry:
    """Lengths and offsets of one attention call."""

    L: int
    S: int
    q_offset: int = 0
    kv_offset: int = 0


@dataclass
class Tile:
    """Query rows [q_lo, q_hi) against the key columns in ``ranges`` (local indices)."""

    xp: Any
    device: Any
    geometry: Geometry
    q_lo: int
    q_hi: int
    ranges: Ranges

    @lazy_attribute
    def q_index(self) -> Any:  # (Bq, 1) local row indices
        return self.xp.arange(self.q_lo, self.q_hi, device=self.device)[:, None]

    @lazy_attribute
    def k_index(self) -> Any:  # (1, Sk) local column indices of the selected ranges
        xp = self.xp
        parts = [xp.arange(lo, hi, device=self.device) for lo, hi in self.ranges]
        return (parts[0] if len(parts) == 1 else xp.concat(parts))[None, :]

    def q_pos(self, alignment: str = "top_left") -> Any:
        g = self.geometry
        shift = g.S - g.L if alignment == "bottom_right" else 0
        return self.q_index + (g.q_offset + shift)

    @lazy_attribute
    def k_pos(self) -> Any:
        return self.k_index + self.geometry.kv_offset

    def columns(self, x: Any) -> Any:
        """The selected columns of x's last axis (x itself where that axis is 1)."""
        if x.shape[-1] == 1:
            return x
        parts = [x[..., lo:hi] for lo, hi in self.ranges]
        return parts[0] if len(parts) == 1 else self.xp.concat(parts, axis=-1)

    def rows(self, x: Any) -> Any:
        """Rows [q_lo, q_hi) of x's second-to-last axis (x itself where that axis is 1)."""
        return x if x.shape[-2] == 1 else x[..., self.q_lo : self.q_hi, :]


def merge_ranges(ranges: Ranges) -> Ranges:
    """Sorted, non-empty, non-overlapping, adjacent ranges joined."""
    out: Ranges = []
    for lo, hi in sorted(r for r in ranges if r[1] > r[0]):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def clip_ranges(ranges: Ranges, S: int) -> Ranges:
    """``ranges`` clipped to the call's key columns [0, S), merged."""
    return merge_ranges([(max(0, lo), min(S, hi)) for lo, hi in ranges])


def intersect_ranges(a: Ranges, b: Ranges) -> Ranges:
    """The columns in both ``a`` and ``b``, merged."""
    out = [(max(l1, l2), min(h1, h2)) for l1, h1 in a for l2, h2 in b]
    return merge_ranges(out)
