"""Two exact shortcuts of the blocked executor, and when they apply.

- **no row maximum** (``shift_free``): when ``scale * max_i |q_i| * max_j |k_j|``
  (Cauchy-Schwarz) proves no exp can overflow or turn subnormal, the softmax needs no
  maximum subtracted: the same function;
- **row sums from the value product**: without weights or dropout, ``e @ [v | 1]``
  gives ``e @ v`` and the row sums in one product.

The bound is decided on concrete values only (never under ``jax.jit``) and only where L
and S are at least 2E.
"""

from __future__ import annotations

import math
from typing import Any

from ..problem import Problem
from ..shapes import prod

__all__ = ["scores_bounded", "shift_free_limit"]


def shift_free_limit(dtype_info: Any, S: int) -> float:
    """The largest T such that scores in [-T, T] need no max subtraction: S * exp(T)
    stays 2**-3 below the largest float and exp(-T) stays 2**3 above the smallest normal
    number (so no exp overflows, underflows or loses precision to subnormals)."""
    top = math.log(dtype_info.max) - math.log(max(S, 1)) - 3 * math.log(2)
    bottom = -math.log(dtype_info.smallest_normal) - 3 * math.log(2)
    return min(top, bottom)


def scores_bounded(p: Problem, q: Any, k: Any) -> bool:
    """Whether |scale * q_i . k_j| <= shift_free_limit for all pairs, by Cauchy-Schwarz
    (scale^2 max_i |q_i|^2 max_j |k_j|^2 <= T^2; NaN or inf fails the test). Decided on
    concrete values only: under tracing (jax.jit) it is False. Skipped (False) for short
    query or key axes, where the norms would cost more than the passes they save."""
    if min(p.L, p.S) < 2 * q.shape[-1]:
        return False
    xp = p.xp
    try:
        q_sq = _max_square_norm(xp, q, p.backend.concrete_float)  # max_i |q_i|^2
        k_sq = _max_square_norm(xp, k, p.backend.concrete_float)  # max_j |k_j|^2
    except (TypeError, RuntimeError, ValueError):  # traced: no concrete value (jax.jit)
        return False
    limit = shift_free_limit(xp.finfo(q.dtype), p.S)
    return p.scale * p.scale * q_sq * k_sq <= limit * limit


def _max_square_norm(xp: Any, x: Any, to_float: Any) -> float:
    """max over rows of |x_r|^2 for x (..., N, E), NaN if any is NaN, read 2**21 elements
    at a time: a backend's vecdot may build the (..., N, E) product first, and a
    temporary over 32 MiB is fresh, page-faulted memory on every call."""
    n = x.shape[-2]
    rows = max(1, (2**21) // max(1, prod(x.shape[:-2]) * x.shape[-1]))
    best = -math.inf
    for lo in range(0, n, rows):
        part = x[..., lo : min(lo + rows, n), :]  # (..., <= rows, E)
        value = to_float(xp.max(xp.vecdot(part, part)))
        if math.isnan(value):
            return value
        best = max(best, value)
    return best
