"""Blocked exact attention: the executor behind ``impl="generic"`` and ``impl="auto"``.

Read it in this order: :mod:`.executor` (the loop over query blocks), :mod:`.block` (one
block: the plain formula and its exact variants), :mod:`.tiles` (which key columns a
block reads and which pairs are allowed), :mod:`.operands` (dtypes, the GQA layout, the
NaN guard), :mod:`.shortcuts`, :mod:`.cost` (block size, recomputation) and
:mod:`.translated_runs` (a window's interior in one kernel call).
"""

from __future__ import annotations

from .executor import blocked_attention

__all__ = ["blocked_attention"]
