"""Gradients that many blocks add into: key/value gradients over key segments, and sums
over broadcast axes.

The array API has no scatter-add, so the key axis is cut at every range boundary of
every block into segments, each keeping one running sum; the gradient is their
concatenation, and the work is what the blocks attend, never (..., S, E) per block.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SegmentSums", "sum_to_shape"]


def sum_to_shape(xp: Any, x: Any, shape: tuple[int, ...]) -> Any:
    """``x`` summed over the axes it gained by broadcasting to reach ``shape``: leading
    axes ``shape`` lacks, and axes where ``shape`` has 1 and ``x`` more (the reverse of
    ``broadcast_to``; a gradient of a broadcast operand)."""
    extra = x.ndim - len(shape)
    if extra > 0:
        x = xp.sum(x, axis=tuple(range(extra)))
    elif extra < 0:  # fewer dims (a block's zeros): size-1 axes in front
        x = xp.reshape(x, (*((1,) * -extra), *x.shape))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and x.shape[i] != 1)
    if axes:
        x = xp.sum(x, axis=axes, keepdims=True)
    if tuple(x.shape) != tuple(shape):  # an axis x never varied along (zeros)
        x = xp.broadcast_to(x, tuple(shape))
    return x


class SegmentSums:
    """Running sums of contributions to rows [lo, hi) of axis -2 of an (..., S, F) array.

    ``boundaries``: every range end any contribution will have (with 0 and S), so that
    each contribution covers whole segments. ``add(lo, hi, x)`` adds x (..., hi - lo, F)
    into rows [lo, hi); ``result(shape, dtype, device)`` the (..., S, F) total, zero in
    rows nothing was added to, summed down to ``shape``'s leading dims.
    """

    def __init__(self, xp: Any, S: int, boundaries: set[int]) -> None:
        self.xp = xp
        self.S = S
        self.cuts = sorted({0, S, *(b for b in boundaries if 0 <= b <= S)})
        self.index = {b: i for i, b in enumerate(self.cuts)}
        self.sums: list[Any] = [None] * (len(self.cuts) - 1)

    def add(self, lo: int, hi: int, x: Any) -> None:
        """Add ``x`` (..., hi - lo, F) into rows [lo, hi)."""
        first, last = self.index[lo], self.index[hi]
        for i in range(first, last):
            a, b = self.cuts[i], self.cuts[i + 1]
            piece = x[..., a - lo : b - lo, :]
            held = self.sums[i]
            self.sums[i] = piece if held is None else held + piece

    def result(self, shape: tuple[int, ...], dtype: Any, device: Any) -> Any:
        """The (..., S, F) total in ``shape`` (the operand's shape) and ``dtype``."""
        xp = self.xp
        target = (*shape[:-2], shape[-1])  # leading dims and F, per segment
        parts = []
        for i, held in enumerate(self.sums):
            rows = self.cuts[i + 1] - self.cuts[i]
            if held is None:
                parts.append(xp.zeros((*target[:-1], rows, target[-1]), dtype=dtype, device=device))
                continue
            held = sum_to_shape(xp, held, (*shape[:-2], rows, shape[-1]))
            if tuple(held.shape[:-2]) != tuple(shape[:-2]):  # broadcast up (a size-1 axis)
                held = xp.broadcast_to(held, (*shape[:-2], rows, shape[-1]))
            parts.append(held if held.dtype == dtype else xp.astype(held, dtype))
        if not parts:
            return xp.zeros(shape, dtype=dtype, device=device)
        return parts[0] if len(parts) == 1 else xp.concat(parts, axis=-2)  # (..., S, F)
