"""Independent float64 NumPy oracle for scaled dot-product attention.

The ground truth of the conformance matrix, sharing no code with the executor.

Shapes (``...`` are leading dims, broadcast by NumPy rules)::

    query (..., Hq, L, E)   key (..., Hkv, S, E)   value (..., Hkv, S, Ev)
    out   (..., Hq, L, Ev)  weights (..., Hq, L, S)  lse (..., Hq, L)

Positions are ``qpos[i] = q_offset + i + shift`` (``shift = S - L`` for
``"bottom_right"``, else 0) and ``kpos[j] = kv_offset + j``; a key is allowed when the
causal rule, the window rule and the user mask all allow it. Masked positions never
influence any result; a row with no allowed key gives out 0, weights 0, ``lse = -inf``.
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
