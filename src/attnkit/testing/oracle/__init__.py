"""Independent float64 NumPy oracle for scaled dot-product attention.

The ground truth of attnkit's conformance matrix and of :mod:`attnkit.testing` (not
``impl="reference"``, the library's own plain formula), written without any code of the
library's executor: NumPy only, clarity first, speed and memory last.

Shapes (``...`` are leading dims, broadcast by NumPy rules)::

    query (..., Hq, L, E)   key (..., Hkv, S, E)   value (..., Hkv, S, Ev)
    out   (..., Hq, L, Ev)  weights (..., Hq, L, S)  lse (..., Hq, L)

A rank-2 input ``(L, E)`` simply has no head axis. Positions are
``qpos[i] = q_offset + i + shift`` and ``kpos[j] = kv_offset + j`` with
``shift = 0`` (``"top_left"``) or ``S - L`` (``"bottom_right"``). A key is
allowed when the causal rule, the window rule and the user mask all allow it.
Masked positions never influence any result, even if the raw score, key or
value there is NaN or infinite. A row with no allowed key gives out 0,
weights 0 and ``lse = -inf``.

Modules: ``forward`` (:func:`attention`, :func:`allowed_mask`, :func:`attention_lowp`),
``gradients`` (:func:`attention_grad`, :func:`merge`), ``rounding`` (:func:`round_to`).
"""

from __future__ import annotations

from .forward import Result, allowed_mask, attention, attention_lowp
from .gradients import attention_grad, merge
from .rounding import round_to

__all__ = [
    "Result",
    "allowed_mask",
    "attention",
    "attention_grad",
    "attention_lowp",
    "merge",
    "round_to",
]
