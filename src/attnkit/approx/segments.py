"""Splitting a sequence into m contiguous segments of nearly equal size, and their means.

n positions split as ``numpy.array_split`` does (the first n % m segments one longer),
n = 7, m = 3::

    position  0 1 2 | 3 4 | 5 6
    segment   0 0 0 | 1 1 | 2 2

With key padding the segments cover the live keys only.
"""

from __future__ import annotations

from typing import Any

from ..errors import ParameterError

__all__ = ["segment_ids", "segment_means"]


def segment_ids(xp: Any, rank: Any, n: Any, m: int) -> Any:
    """The segment (0 .. m-1) of the position of rank ``rank`` among ``n`` positions.

    ``rank`` and ``n`` are integer arrays that broadcast (``n`` may be data: the count of
    keys that may be attended, so this stays traceable under ``jax.jit``)."""
    c = n // m  # segment size, (..., 1)
    r = n % m  # how many segments hold c + 1
    boundary = r * (c + 1)  # first position of the segments of size c
    step = xp.where(c > 0, c, xp.ones_like(c))  # c = 0 only when boundary = n (rank < n)
    return xp.where(rank < boundary, rank // (c + 1), r + (rank - boundary) // step)


def segment_means(x: Any, m: int, alive: Any = None) -> tuple[Any, Any]:
    """Means of ``x`` (..., n, D) over m segments along axis -2: ((..., m, D), alive (..., m)).

    Without ``alive`` the n positions split as in the module docstring (n >= m needed)
    and every segment is alive (the second result is None). With ``alive`` (bool (..., n),
    True = position counts) the positions that count are split in order, by their rank
    among themselves, and positions that do not count never enter a mean; a segment with
    no position (fewer live positions than m, or none) has mean 0 and is reported dead::

        mean[i] = sum(x[t] for live t in segment i) / (live positions in segment i)

    The first form reshapes (exact, O(n D)); the second builds the (..., m, n) 0/1
    assignment and multiplies (O(m n D), like the attention that uses the landmarks).
    """
    import array_api_compat

    xp = array_api_compat.array_namespace(x)
    n, D = x.shape[-2], x.shape[-1]
    lead = tuple(x.shape[:-2])
    if alive is None:
        if m > n:
            raise ParameterError(
                f"cannot split {n} positions into {m} segments; use at most {n} (here: "
                f"num_landmarks <= {n})."
            )
        c, r = divmod(n, m)
        parts = []
        if r:
            head = xp.reshape(x[..., : r * (c + 1), :], (*lead, r, c + 1, D))  # (..., r, c+1, D)
            parts.append(xp.mean(head, axis=-2))  # (..., r, D)
        if m - r:
            tail = xp.reshape(x[..., r * (c + 1) :, :], (*lead, m - r, c, D))  # (..., m-r, c, D)
            parts.append(xp.mean(tail, axis=-2))  # (..., m-r, D)
        return (parts[0] if len(parts) == 1 else xp.concat(parts, axis=-2)), None
    device = array_api_compat.device(x)
    live = xp.astype(alive, xp.int32)  # (..., n); int32: JAX has no int64 by default
    rank = xp.cumulative_sum(live, axis=-1, dtype=xp.int32) - live  # (..., n) rank among live
    count = xp.sum(live, axis=-1, keepdims=True, dtype=xp.int32)  # (..., 1)
    seg = segment_ids(xp, rank, count, m)  # (..., n)
    ids = xp.arange(m, dtype=xp.int32, device=device)[:, None]  # (m, 1)
    member = (seg[..., None, :] == ids) & alive[..., None, :]  # (..., m, n)
    weights = xp.astype(member, x.dtype)  # (..., m, n)
    sizes = xp.sum(weights, axis=-1, keepdims=True)  # (..., m, 1)
    sums = weights @ x  # (..., m, D)
    means = sums / xp.where(sizes > 0, sizes, 1.0)  # (..., m, D), 0 on empty segments
    return means, sizes[..., 0] > 0
