"""Measuring a result against an expectation: the largest error, the allowed one, and
which rows differ (a row: one query's output vector, indexed over the leading axes).

NaN is checked first: a NaN where a number is expected differs whatever the tolerance
(unless ``nan_ok``), a number where NaN is expected differs too; equal infinities agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Comparison", "compare", "row_list"]


@dataclass(frozen=True)
class Comparison:
    """``error`` max |actual - expected| (inf where NaN differs), ``allowed`` the
    tolerance, ``rows`` bool (..., L): rows that differ, ``nan_rows`` rows with NaN where
    a number is expected."""

    error: float
    allowed: float
    rows: np.ndarray
    nan_rows: np.ndarray

    @property
    def ok(self) -> bool:
        return not self.rows.any()

    @property
    def count(self) -> int:
        return int(self.rows.sum())

    def words(self, what: str = "output") -> str:
        """``output: max error 3.1e-01 > allowed 1.2e-14 on 6 of 40 rows: (0, 0, 1), ...``"""
        total = int(self.rows.size)
        error = "NaN" if np.isinf(self.error) and self.nan_rows.any() else f"{self.error:.2e}"
        line = (
            f"{what}: max error {error} > allowed {self.allowed:.2e} on {self.count} of "
            f"{total} rows: {row_list(self.rows)}"
        )
        if self.nan_rows.any():
            line += f" ({int(self.nan_rows.sum())} of them NaN where a number is expected)"
        return line


def row_list(rows: np.ndarray, most: int = 6) -> str:
    """The first ``most`` True indices of ``rows`` as tuples, and how many more."""
    found = [tuple(int(i) for i in idx) for idx in np.argwhere(rows)[:most]]
    text = ", ".join(str(t[0]) if len(t) == 1 else str(t) for t in found)
    more = int(rows.sum()) - len(found)
    return text + (f", +{more} more" if more > 0 else "")


def compare(
    actual: np.ndarray, expected: np.ndarray, allowed: float, nan_ok: np.ndarray | None = None
) -> Comparison:
    """Compare float64 arrays of one shape (..., L, X) row by row under ``allowed``."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    may_nan = np.zeros(a.shape[:-1], bool) if nan_ok is None else nan_ok
    may_nan = np.broadcast_to(may_nan[..., None], a.shape)
    with np.errstate(invalid="ignore", over="ignore"):
        gap = np.abs(a - e)
    gap = np.where(a == e, 0.0, gap)  # equal infinities
    gap = np.where(nan_a & (nan_e | may_nan), 0.0, gap)
    gap = np.where(nan_a ^ nan_e, np.inf, gap)
    gap = np.where(nan_a & may_nan, 0.0, gap)
    gap = np.where(np.isnan(gap), np.inf, gap)
    rows = np.any(gap > allowed, axis=-1)
    nan_rows = np.any(nan_a & ~nan_e & ~may_nan, axis=-1)
    return Comparison(float(np.max(gap, initial=0.0)), allowed, rows, nan_rows)
