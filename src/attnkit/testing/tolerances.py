"""The one tolerance table of the conformance matrix and of :mod:`attnkit.testing`.

float32 and float64 (exact paths): a multiple of epsilon scaled by the problem's
magnitude (rounding a score of size s moves a weight by about eps * s)::

    allowed = K[dtype] * eps[dtype] * (1 + max|scaled scores|) * max(1, max|gold|)

float16 and bfloat16: relative to the error of the same formula computed in that
precision (``oracle.attention_lowp``), rho = 2 for outputs, 5 for gradients::

    allowed = rho * max|lowp - gold| + eps[dtype] * max(1, max|gold|)

``score_bound`` bounds ``max|scaled scores|`` (Cauchy-Schwarz plus the largest bias).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = [
    "EPS",
    "RHO_GRAD",
    "RHO_OUT",
    "K",
    "assert_close",
    "exact_allowed",
    "lowp_allowed",
    "magnitude",
    "score_bound",
]

EPS = {"float64": 2.0**-52, "float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}
K = {"float64": 64.0, "float32": 64.0}
RHO_OUT = 2.0
RHO_GRAD = 5.0


def score_bound(query: Any, key: Any, scale: float | None, mask: Any = None) -> float:
    """An upper bound of ``|scaled score| + |additive bias|`` over the call: ``|scale| *
    max_i |q_i| * max_j |k_j| + max|finite bias|``; ``scale`` None means 1/sqrt(E)."""
    q, k = np.asarray(query, dtype=np.float64), np.asarray(key, dtype=np.float64)
    E = q.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(E) if E else 1.0
    with np.errstate(invalid="ignore", over="ignore"):
        qn = np.linalg.norm(np.where(np.isfinite(q), q, 0.0), axis=-1)
        kn = np.linalg.norm(np.where(np.isfinite(k), k, 0.0), axis=-1)
    bound = abs(float(scale)) * float(np.max(qn, initial=0.0)) * float(np.max(kn, initial=0.0))
    if mask is not None and np.asarray(mask).dtype != np.bool_:
        bias = np.asarray(mask, dtype=np.float64)
        bound += float(np.max(np.abs(bias[np.isfinite(bias)]), initial=0.0))
    return bound


def magnitude(gold: Any) -> float:
    """max(1, max|gold|) over gold's finite entries (an lse of -inf, a NaN row: ignored)."""
    gold = np.asarray(gold, dtype=np.float64)
    return max(1.0, float(np.max(np.abs(gold[np.isfinite(gold)]), initial=0.0)))


def exact_allowed(dtype: str, score_max: float, gold: np.ndarray) -> float:
    """K[dtype] * eps * (1 + score_max) * max(1, max|gold|), over gold's finite entries."""
    return K[dtype] * EPS[dtype] * (1.0 + score_max) * magnitude(gold)


def lowp_allowed(dtype: str, baseline_err: float, gold: np.ndarray, rho: float) -> float:
    """rho * (the naive low-precision formula's error) + eps * max(1, max|gold|)."""
    return rho * baseline_err + EPS[dtype] * magnitude(gold)


def assert_close(
    what: str, got: np.ndarray, gold: np.ndarray, allowed: float, context: str
) -> float:
    """Assert |got - gold| <= allowed elementwise-max; the message shows measured vs allowed."""
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == gold.shape, f"{what}: shape {got.shape}, expected {gold.shape} ({context})"
    bad_nan = np.isnan(got) & ~np.isnan(gold)
    assert not bad_nan.any(), (
        f"{what}: {int(bad_nan.sum())} NaN where the reference is a number, first at "
        f"{tuple(int(i) for i in np.argwhere(bad_nan)[0])} ({context})"
    )
    same_inf = np.isinf(gold) & (got == gold)
    with np.errstate(invalid="ignore"):
        diff = np.where(same_inf, 0.0, np.abs(got - gold))
    err = float(np.max(diff, initial=0.0))
    assert err <= allowed, (
        f"{what}: max error {err:.3e} > allowed {allowed:.3e} at "
        f"{tuple(int(i) for i in np.unravel_index(np.argmax(diff), diff.shape))} ({context})"
    )
    return err
