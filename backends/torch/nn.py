"""PyTorch ``nn.Module`` wrappers: one thin adapter over attnkit's core.

All the math is :func:`attnkit.scaled_dot_product_attention`,
:func:`attnkit.multi_head_attention` and :mod:`attnkit.approx`; these classes only hold
``nn.Parameter``s, convert PyTorch's conventions, and draw dropout from a
``torch.Generator``. They live in one module each and are re-exported here:

``MultiheadAttention``          the drop-in ``torch.nn.MultiheadAttention``
                                (``nn_multihead.py``; inputs and masks checked and converted by
                                ``nn_inputs.py``, torch's layers and autocast: ``nn_fit.py``)
``ScaledDotProductAttention``   attention over given heads (``nn_sdpa.py``)
``LinformerAttention``, ``PerformerAttention``, ``NystromAttention``
                                the approximations (``nn_approx.py``)
"""

from __future__ import annotations

from .nn_approx import LinformerAttention, NystromAttention, PerformerAttention
from .nn_multihead import MultiheadAttention
from .nn_sdpa import ScaledDotProductAttention

__all__ = [
    "LinformerAttention",
    "MultiheadAttention",
    "NystromAttention",
    "PerformerAttention",
    "ScaledDotProductAttention",
]
