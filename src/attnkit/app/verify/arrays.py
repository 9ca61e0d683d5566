"""The NumPy side of ``attnkit verify``: golden vectors (NumPy ``.npz`` files) read, and
results measured against the float64 oracle.

The golden vectors are NumPy arrays (their exchange format); the application
(:mod:`attnkit.app.verify`) orchestrates and words the findings, and does its array work
through these functions, so that it imports no framework itself. Shapes: ``out``
(..., Hq, L, Ev), ``lse`` (..., Hq, L), ``value`` (..., Hk, S, Ev).
"""

from __future__ import annotations

import json
from typing import IO, Any

import numpy as np

__all__ = [
    "difference",
    "empty_rows",
    "empty_rows_differ",
    "load",
    "magnitude",
    "max_error",
    "score_max",
]


def load(file: IO[bytes]) -> dict[str, Any]:
    """Every array of one golden ``.npz`` file by name; ``kwargs`` decoded from its JSON."""
    with np.load(file) as g:
        arrays: dict[str, Any] = {name: g[name] for name in g.files}
    arrays["kwargs"] = json.loads(str(arrays["kwargs"]))
    return arrays


def empty_rows(lse: Any) -> Any:
    """True where a query row has no key to attend (lse = -inf): (..., Hq, L)."""
    return np.isneginf(lse)


def score_max(query: Any, key: Any, scale: float | None) -> float:
    """max |scale * q k^T| over the whole score matrix (the tolerance's magnitude);
    ``scale`` None means 1/sqrt(E). GQA key heads are shared by their query heads."""
    q, k = query, key
    if q.ndim >= 3 and k.ndim >= 3 and q.shape[-3] != k.shape[-3]:
        k = np.repeat(k, q.shape[-3] // k.shape[-3], axis=-3)  # (..., Hq, S, E)
    if k.shape[-2] == 0:
        return 0.0
    scale = scale or 1.0 / np.sqrt(q.shape[-1])
    return float(np.max(np.abs(q @ np.swapaxes(k, -1, -2))) * abs(scale))


def magnitude(gold: Any) -> float:
    """max(1, max |gold|) over the finite entries of ``gold``."""
    finite = gold[np.isfinite(gold)]
    return max(1.0, float(np.max(np.abs(finite), initial=0.0)))


def max_error(got: Any, gold: Any) -> float:
    """max |got - gold| in float64; -inf must match -inf exactly (lse of empty rows):
    inf where the shapes or the -inf entries differ, NaN where ``got`` has a NaN."""
    got = np.asarray(got, dtype=np.float64)
    if got.shape != gold.shape:
        return float("inf")
    if np.isnan(got).any():
        return float("nan")
    if not np.array_equal(np.isneginf(got), np.isneginf(gold)):
        return float("inf")
    finite = np.isfinite(gold)
    return float(np.max(np.abs(got[finite] - gold[finite]), initial=0.0))


def empty_rows_differ(value: Any, empty: Any, theirs: Any, eps: float) -> str:
    """Words for what ``theirs`` (..., Hq, L, Ev) gives on the rows ``empty`` marks (no
    key to attend), where the oracle gives 0; "" if it gives 0 there too (within
    8 eps * max(1, max|value|), the rounding of the values)."""
    empty = np.broadcast_to(empty, theirs.shape[:-1])
    if not empty.any():
        return ""
    rows = theirs[empty]  # (n, Ev)
    scale = max(1.0, float(np.max(np.abs(value), initial=0.0)))
    if not np.isnan(rows).any() and float(np.max(np.abs(rows), initial=0.0)) <= 8 * eps * scale:
        return ""
    v = np.broadcast_to(value, (*theirs.shape[:-2], *value.shape[-2:]))
    mean = np.broadcast_to(v.mean(axis=-2, keepdims=True), theirs.shape)[empty]
    if np.isnan(rows).all():
        what = "NaN"
    elif np.allclose(mean, rows, atol=16 * eps * scale):
        what = "the mean of the values (uniform weights)"
    else:
        what = "nonzero values"
    return f"{int(empty.sum())} rows with no key to attend give {what}"


def difference(
    out: Any, empty: Any, theirs: Any, allowed: float, float32_allowed: float | None
) -> tuple[str, str]:
    """(kind, words) for where ``theirs`` differs from the oracle's ``out`` on the rows
    with keys: "precision" when the error is within ``float32_allowed`` (a float64 call
    computed in float32; None to not ask), else "differs" with the NaN rows or the
    number of rows beyond ``allowed``."""
    live = ~np.broadcast_to(empty, theirs.shape[:-1])
    gap = np.abs(np.nan_to_num(theirs, nan=np.inf) - out)[live]  # (rows with keys, Ev)
    error = float(np.max(gap, initial=0.0))
    if float32_allowed is not None and error <= float32_allowed:
        return "precision", f"error {error:.1e}: float32's accuracy on float64 inputs"
    if np.isnan(theirs[live]).any():
        return "differs", f"NaN on {int(np.isnan(theirs[live]).any(-1).sum())} rows with keys"
    bad = int(np.any(gap > allowed, -1).sum())
    return "differs", f"error {error:.1e} on {bad} of {int(live.sum())} rows with keys"
