"""Nystromformer (Xiong et al. 2021): softmax attention through m landmarks.

The landmarks are segment means (:mod:`.segments`) of the queries, Q~ (..., m, E), and of
the keys, K~ (..., m, E)::

    F = softmax(scale * Q  K~^T)          # (..., L, m)
    A = softmax(scale * Q~ K~^T)          # (..., m, m)
    B = softmax(scale * Q~ K^T)           # (..., m, S)
    out = F pinv(A) (B V)                 # (..., L, Ev); O((L + S) m)

With m = L = S this is exact attention. pinv(A) is the paper's iteration, per batch and
head, from Z_0 = A^T / (||A||_1 ||A||_inf)::

    Z_{j+1} = Z_j (13 I - A Z_j (15 I - A Z_j (7 I - A Z_j))) / 4
"""

from __future__ import annotations

from typing import Any

import array_api_compat as aac

from ..attention import scaled_dot_product_attention
from ..checks import check_positive_int
from ..errors import ParameterError
from ..softmax import masked_softmax
from ._common import prepare
from .segments import segment_means

__all__ = ["iterative_pinv", "nystrom"]


def nystrom(
    query: Any,
    key: Any,
    value: Any,
    *,
    num_landmarks: int = 64,
    pinv_iterations: int = 6,
    key_padding_mask: Any = None,
    scale: float | None = None,
) -> Any:
    """Nystromformer attention on NumPy, PyTorch, JAX or any array-API arrays.

    Args:
        query: (..., H, L, E); key: (..., H, S, E); value: (..., H, S, Ev), leading dims
            broadcast as in :func:`attnkit.scaled_dot_product_attention`.
        num_landmarks: m <= min(L, S), the segments the queries and keys are averaged
            over (L and S need not be multiples of m: segments differ by at most one).
        pinv_iterations: iterations of the pseudo-inverse (the paper uses 6; about 20
            make it exact to float64 rounding on a well-conditioned A). More is not always
            better: with an ill-conditioned A the truncated iteration acts as a
            regularizer and the exact pseudo-inverse can amplify noise, and once converged
            the rounding error grows again (:func:`iterative_pinv`). On the benchmark's
            low-rank input (L = 1024, m = 64, float32) the error against exact attention
            is 2.0e-2 at 6 iterations, 2.5e-3 at 10, 1.3e-3 at 20 and overflows at 40.
        key_padding_mask: bool (..., S), True = key may be attended, or
            ``attnkit.masks.key_padding(lengths)``. The key landmarks are then the
            segment means of the live keys only (split by their rank among the live
            keys), so a padded sequence gives the result of the unpadded one; a
            landmark with no live key is masked out of F and A.
        scale: factor on the scores, default 1/sqrt(E).

    Returns:
        (..., H, L, Ev) in the inputs' dtype (float16/bfloat16 computed in float32).
        A (batch, head) with no live key gives 0, never NaN.

    Raises:
        ShapeError, DTypeError, ParameterError, ArgumentTypeError (attnkit errors) before
        any work, naming the argument, its shape and the fix.
    """
    m = check_positive_int("num_landmarks", num_landmarks, "use e.g. 64")
    iterations = check_positive_int("pinv_iterations", pinv_iterations, "the paper uses 6")
    ops = prepare(query, key, value, key_padding_mask, scale)
    if m > min(ops.L, ops.S):
        raise ParameterError(
            f"num_landmarks={m} exceeds min(L, S) = min({ops.L}, {ops.S}): each landmark "
            f"averages at least one position. Use num_landmarks <= {min(ops.L, ops.S)}, or "
            "exact attention (attnkit.scaled_dot_product_attention) at this length."
        )
    xp = ops.xp
    q_land, _ = segment_means(ops.query, m)  # (..., m, E)
    k_land, land_alive = segment_means(ops.key, m, ops.alive)  # (..., m, E), (..., m) | None
    land_allowed = None if land_alive is None else land_alive[..., None, :]  # (..., 1, m)
    key_allowed = None if ops.alive is None else ops.alive[..., None, :]  # (..., 1, S)
    scores = (q_land * ops.scale) @ xp.matrix_transpose(k_land)  # (..., m, m)
    a, _ = masked_softmax(xp, scores, land_allowed)  # A (..., m, m)
    # B V and F (pinv(A) B V) are exact attentions (over the keys, then over the key
    # landmarks): the blocked executor keeps their scores to one block of rows at a time.
    bv = scaled_dot_product_attention(
        q_land, ops.key, ops.value, attn_mask=key_allowed, scale=ops.scale
    )  # (..., m, Ev)
    zbv = iterative_pinv(a, iterations) @ bv  # (..., m, Ev)
    out = scaled_dot_product_attention(
        ops.query, k_land, zbv, attn_mask=land_allowed, scale=ops.scale
    )  # (..., L, Ev)
    return ops.finish(out)


def iterative_pinv(a: Any, iterations: int = 6) -> Any:
    """The Moore-Penrose pseudo-inverse of each square matrix of ``a`` (..., m, m), by
    the iteration in the module docstring (Razavi et al. 2014, as in Nystromformer).

    Converges to pinv(a) for any a (also singular: in exact arithmetic the iterates stay
    in the range of a^T); the error shrinks by about 3.25x per step at first, then
    cubically. A zero matrix gives 0. Rounding is not self-correcting when ``a`` is
    (numerically) rank-deficient: once converged, the rounding error outside the range of
    ``a`` grows about 3.25x per further step, so keep the iterations near what
    convergence needs (the paper's 6; about 12 for a well-conditioned rank-deficient
    6 x 6 in float64) rather than many more."""
    iterations = check_positive_int("iterations", iterations, "the paper uses 6")
    xp = aac.array_namespace(a)
    m = a.shape[-1]
    absolute = xp.abs(a)
    norm_1 = xp.max(xp.sum(absolute, axis=-2), axis=-1)  # (...,) largest column sum
    norm_inf = xp.max(xp.sum(absolute, axis=-1), axis=-1)  # (...,) largest row sum
    denom = norm_1 * norm_inf
    denom = xp.where(denom > 0, denom, 1.0)[..., None, None]  # (..., 1, 1)
    z = xp.matrix_transpose(a) / denom  # (..., m, m)
    eye = xp.eye(m, dtype=a.dtype, device=aac.device(a))  # (m, m)
    for _ in range(iterations):
        az = a @ z  # (..., m, m)
        z = 0.25 * (z @ (13 * eye - az @ (15 * eye - az @ (7 * eye - az))))
    return z
