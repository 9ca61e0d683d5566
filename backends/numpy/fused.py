"""NumPy's fast path for one block of attnkit's executor (``impl="auto"``).

The generic executor writes each step as a new array: on NumPy every (..., Bq, Sk) pass
(scores, where, max, subtract, exp, sum) allocates and page-faults fresh memory and runs
over all heads before the next step starts, so the scores leave the cache between
steps. This kernel computes the same block head by head in one scratch buffer reused in
place (matmul with ``out=``, ``exp(..., out=)``), so each head's scores stay in cache
from the product to the exponential, and the row sums come from a product with a
vector of ones. Same formula, same masking and empty-row rules as
:mod:`attnkit.dense`::

    s   = (q * scale) @ k^T (+ additive mask), -inf where masked     # (Bq, Sk) per head
    m   = row max (0 on empty rows; 0 when shift_free)
    e   = exp(s - m)
    out = (e @ v) / sum(e)                                # 0 on empty rows
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["block_attention"]

_SCRATCH = threading.local()


def block_attention(
    q: Any, k: Any, v: Any, mask: Any, scale: float, shift_free: bool = False
) -> Any:
    """One block: q (..., Bq, E), k (..., Sk, E), v (..., Sk, Ev), the scores' ``scale``, mask bool
    (True = may attend), additive float or None, all broadcastable in the leading dims.
    ``shift_free``: every score is known to be small enough for exp without the row max.
    Returns out (..., Bq, Ev) in q's dtype, or None where this kernel does not apply."""
    import numpy as np

    if not all(isinstance(x, np.ndarray) for x in (q, k, v)) or q.dtype != k.dtype:
        return None
    if q.dtype not in (np.float32, np.float64) or k.shape[-2] == 0:
        return None
    Bq, Sk, Ev = q.shape[-2], k.shape[-2], v.shape[-1]
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    if mask is not None:
        lead = np.broadcast_shapes(lead, mask.shape[:-2])
    # broadcast views, indexed head by head below: shared key/value heads (GQA) and
    # masks shared across heads are never copied
    qs = np.broadcast_to(q, (*lead, Bq, q.shape[-1]))
    ks = np.broadcast_to(k, (*lead, Sk, k.shape[-1]))
    vs = np.broadcast_to(v, (*lead, Sk, Ev))
    bool_mask = mask is not None and mask.dtype == np.bool_
    if mask is not None:  # bool: the positions to blank; float: added to the scores
        ms = np.broadcast_to(~mask if bool_mask else mask, (*lead, Bq, Sk))
        if not bool_mask:  # -inf positions are blanked too: NaN + -inf would be NaN
            blank = np.broadcast_to(mask == -np.inf, (*lead, Bq, Sk))
    out = np.empty((*lead, Bq, Ev), dtype=q.dtype)
    s = _scratch((Bq, Sk), q.dtype)  # (Bq, Sk), reused across heads and calls
    ones = np.ones((Sk, 1), dtype=q.dtype)
    q_scaled = np.empty((Bq, q.shape[-1]), dtype=q.dtype)
    for n in np.ndindex(*lead):
        np.multiply(qs[n], scale, out=q_scaled)
        np.matmul(q_scaled, ks[n].T, out=s)  # (Bq, Sk)
        if mask is not None:
            if bool_mask:
                np.copyto(s, -np.inf, where=ms[n])
            else:
                np.add(s, ms[n], out=s)
                np.copyto(s, -np.inf, where=blank[n])
        if not shift_free:
            row_max = s.max(axis=-1, keepdims=True)  # (Bq, 1)
            if mask is not None:
                row_max[row_max == -np.inf] = 0.0  # empty rows: any finite value
            np.subtract(s, row_max, out=s)
        np.exp(s, out=s)  # exactly 0 where masked
        num = s @ vs[n]  # (Bq, Ev)
        denom = s @ ones  # (Bq, 1), 0 on empty rows
        if mask is not None:
            denom[denom == 0] = 1.0  # empty rows: num is 0, and so is the output
        np.divide(num, denom, out=out[n])
    return out  # (..., Bq, Ev)


def _scratch(shape: tuple[int, int], dtype: Any) -> Any:
    """A (Bq, Sk) buffer of ``dtype`` kept per thread and reused while it is big enough
    (one block's scores for one head: at most the executor's block budget, 16 MiB)."""
    import numpy as np

    size = shape[0] * shape[1]
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None or buf.dtype != dtype or buf.size < size:
        buf = np.empty(size, dtype=dtype)
        _SCRATCH.buf = buf
    return buf[:size].reshape(shape)
