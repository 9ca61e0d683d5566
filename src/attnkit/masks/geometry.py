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
    "EMPTY",
    "FULL",
    "PARTIAL",
    "Geometry",
    "LoopTile",
    "Ranges",
    "Tile",
    "clip_ranges",
    "intersect_ranges",
    "merge_ranges",
]

#: What a mask allows in a tile of (query rows, key columns): nothing, some pairs (its
#: bool tile must be applied), or every pair (no mask needed): :meth:`Mask.tile_kind`.
EMPTY, PARTIAL, FULL = 0, 1, 2


Ranges = list[tuple[int, int]]


@dataclass(slots=True)  # built on every call: a frozen dataclass costs microseconds more
class Geometry:
    """Lengths and offsets of one attention call."""

    L: int
    S: int
    q_offset: int = 0
    kv_offset: int = 0


class _Positions:
    """Absolute positions of a tile's rows and columns from its local indices."""

    geometry: Geometry
    q_index: Any
    k_index: Any

    def q_pos(self, alignment: str = "top_left") -> Any:
        g = self.geometry
        shift = g.S - g.L if alignment == "bottom_right" else 0
        return self.q_index + (g.q_offset + shift)

    @lazy_attribute
    def k_pos(self) -> Any:
        return self.k_index + self.geometry.kv_offset


@dataclass
class Tile(_Positions):
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

    def columns(self, x: Any) -> Any:
        """The selected columns of x's last axis (x itself where that axis is 1)."""
        if x.shape[-1] == 1:
            return x
        parts = [x[..., lo:hi] for lo, hi in self.ranges]
        return parts[0] if len(parts) == 1 else self.xp.concat(parts, axis=-1)

    def rows(self, x: Any) -> Any:
        """Rows [q_lo, q_hi) of x's second-to-last axis (x itself where that axis is 1)."""
        return x if x.shape[-2] == 1 else x[..., self.q_lo : self.q_hi, :]

    def span(self) -> tuple[int, int, int, int] | None:
        """(q_lo, q_hi, k_lo, k_hi) as Python ints: the rows and the outermost columns."""
        return self.q_lo, self.q_hi, self.ranges[0][0], self.ranges[-1][1]


class LoopTile(_Positions):
    """The tile of a loop over tiles: query rows [q_start, q_start + n_rows) against key
    columns [k_start, k_start + n_cols), where the starts may be traced integers (0-d
    arrays inside ``jax.lax.scan``) and the sizes are static. The same interface as
    :class:`Tile` (``q_index``, ``k_index``, ``q_pos``, ``k_pos``, ``rows``, ``columns``);
    ``span()`` is None, so a mask decides nothing from static bounds. Rows and columns
    past the call's L and S (a loop's padding) read the last row or column of a mask's
    arrays: the executor masks padded keys and drops padded rows itself."""

    def __init__(
        self,
        xp: Any,
        device: Any,
        geometry: Geometry,
        q_start: Any,
        n_rows: int,
        k_start: Any,
        n_cols: int,
    ) -> None:
        self.xp, self.device, self.geometry = xp, device, geometry
        self.q_start, self.n_rows, self.k_start, self.n_cols = q_start, n_rows, k_start, n_cols

    @lazy_attribute
    def q_index(self) -> Any:  # (Bq, 1) local row indices
        return (self.xp.arange(self.n_rows, device=self.device) + self.q_start)[:, None]

    @lazy_attribute
    def k_index(self) -> Any:  # (1, Bk) local column indices
        return (self.xp.arange(self.n_cols, device=self.device) + self.k_start)[None, :]

    def span(self) -> None:
        return None

    def columns(self, x: Any) -> Any:
        """Columns [k_start, k_start + n_cols) of x's last axis (x itself where it is 1)."""
        n = x.shape[-1]
        if n == 1:
            return x
        index = self.xp.clip(self.k_index[0, :], 0, n - 1)  # (Bk,): padding reads the last
        return self.xp.take(x, index, axis=x.ndim - 1)

    def rows(self, x: Any) -> Any:
        """Rows [q_start, q_start + n_rows) of x's second-to-last axis (x itself where 1)."""
        n = x.shape[-2]
        if n == 1:
            return x
        index = self.xp.clip(self.q_index[:, 0], 0, n - 1)  # (Bq,): padding reads the last
        return self.xp.take(x, index, axis=x.ndim - 2)


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
