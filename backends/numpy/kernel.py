"""NumPy's kernel for one block of attnkit's executor (``impl="auto"``).

The same block as :mod:`attnkit.blocked.block`, head by head in slices of rows, in one
reused buffer per thread (:mod:`.threads`)::

    s   = (q * scale) @ k^T (+ additive mask), -inf where masked     # (Bq, Sk) per head
    m   = row max (0 on empty rows; 0 when shift_free)
    e   = exp(s - m), 0 where s - m < log(smallest normal): never subnormal
    out = (e @ v) / sum(e)                                # 0 on empty rows
"""

from __future__ import annotations

import math
import threading
from typing import Any

from .. import BlockTasks
from .threads import MIN_PARALLEL_ELEMENTS, blas_threads, run_parallel

__all__ = ["MIN_TASK_ROWS", "TASK_ELEMENTS", "block_attention", "block_tasks", "task_rows"]

_SCRATCH = threading.local()

#: score elements one task computes at once (4 MiB of float32): the rows of a task are
#: at most this over the key count, and at least MIN_TASK_ROWS
TASK_ELEMENTS = 2**20
MIN_TASK_ROWS = 32


def task_rows(Sk: int) -> int:
    """Query rows one task (one head's slice of a block) computes against Sk keys."""
    return max(MIN_TASK_ROWS, TASK_ELEMENTS // max(Sk, 1))


def block_tasks() -> BlockTasks:
    """How this kernel holds a block's scores (for the executor's memory budget): one
    task's slice of rows per thread, as many threads as BLAS may use now."""
    return BlockTasks(blas_threads(), TASK_ELEMENTS, MIN_TASK_ROWS)


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
    if mask is not None and not np.isfinite(v).all():
        return None  # 0 * inf in the value product would leak into rows not attending it
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
    if mask is not None:  # bool: True = may attend; float: added to the scores
        ms = np.broadcast_to(mask, (*lead, Bq, Sk))
    out = np.empty((*lead, Bq, Ev), dtype=q.dtype)
    ones = np.ones((Sk, 1), dtype=q.dtype)

    def rows(task: tuple[tuple[int, ...], int, int]) -> None:
        """Rows [r0, r1) of head n, in this thread's scratch buffer."""
        n, r0, r1 = task
        s = _scratch((r1 - r0, Sk), q.dtype)  # (rows, Sk), reused across heads and calls
        np.matmul(qs[n][r0:r1] * scale, ks[n].T, out=s)  # (rows, Sk)
        if mask is not None:
            m = ms[n][r0:r1]  # (rows, Sk)
            if bool_mask:
                np.copyto(s, -np.inf, where=~m)
            else:  # -inf positions are blanked too: NaN + -inf would be NaN
                np.add(s, m, out=s)
                np.copyto(s, -np.inf, where=m == -np.inf)
        if not shift_free:
            row_max = s.max(axis=-1, keepdims=True)  # (rows, 1)
            if mask is not None:
                row_max[row_max == -np.inf] = 0.0  # empty rows: any finite value
            np.subtract(s, row_max, out=s)
            # exp below the smallest normal number is subnormal: x86 computes with
            # subnormal operands in microcode, several times slower, and such a weight is
            # under 2**-126 (float32) next to the row maximum's 1, so it becomes 0
            low = _scratch((r1 - r0, Sk), np.bool_, "low")
            np.less(s, _flush_below(s.dtype), out=low)
            np.copyto(s, -np.inf, where=low)
        np.exp(s, out=s)  # exactly 0 where masked
        num = s @ vs[n]  # (rows, Ev)
        denom = s @ ones  # (rows, 1), 0 on empty rows
        if mask is not None:
            denom[denom == 0] = 1.0  # empty rows: num is 0, and so is the output
        np.divide(num, denom, out=out[n][r0:r1])

    heads = list(np.ndindex(*lead))
    threads = blas_threads() if Bq * Sk * len(heads) >= MIN_PARALLEL_ELEMENTS else 1
    # head-major row slices of at most task_rows rows, and enough of them for every
    # thread; each thread takes a contiguous run, so a head's keys stay in its cache
    per_head = -(-threads // max(1, len(heads)))  # slices per head
    step = max(1, min(task_rows(Sk), -(-Bq // per_head)))
    tasks = [(n, r0, min(r0 + step, Bq)) for n in heads for r0 in range(0, Bq, step)]
    if threads > 1 and len(tasks) > 1:
        run_parallel(rows, tasks, min(threads, len(tasks)))
    else:
        for task in tasks:
            rows(task)
    return out  # (..., Bq, Ev)


def _scratch(shape: tuple[int, int], dtype: Any, name: str = "buf") -> Any:
    """A (rows, Sk) buffer of ``dtype`` kept per thread under ``name`` and reused while it
    is big enough (one task's scores: at most TASK_ELEMENTS, or a block's rows)."""
    import numpy as np

    size = shape[0] * shape[1]
    buf = getattr(_SCRATCH, name, None)
    if buf is None or buf.dtype != dtype or buf.size < size:
        buf = np.empty(size, dtype=dtype)
        setattr(_SCRATCH, name, buf)
    return buf[:size].reshape(shape)


def _flush_below(dtype: Any) -> float:
    """log of the smallest normal number of ``dtype``: exp below it is subnormal."""
    import numpy as np

    return math.log(float(np.finfo(dtype).tiny))
