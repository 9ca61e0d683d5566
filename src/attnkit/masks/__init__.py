"""Structured attention masks that tell the executor which key blocks each query block needs.

A :class:`Mask` says, for query rows ``[q_lo, q_hi)``, which key columns may hold an
allowed pair (``key_ranges``: static Python ints, so whole key blocks are never touched)
and which pairs inside those columns are allowed (``tile``: a bool array built from
positions or from the mask's own arrays). Work and memory then grow with the attended
pairs, not with L x S. Every mask can be materialized to a dense bool array and reports
its density. Masks combine with ``&`` and ``|``; pass one as ``attn_mask=``.

Positions are absolute: query row i sits at ``q_offset + i (+ S - L for bottom_right)``
and key column j at ``kv_offset + j``, so masks stay right when attention is computed
piece by piece. Mask kinds (x = may attend, L = S = 6 shown)::

    causal()          sliding_window((2, 0))   documents([2, 4])     global_tokens(1)
    x . . . . .       x . . . . .              x x . . . .           x x x x x x
    x x . . . .       x x . . . .              x x . . . .           x x . . . .
    x x x . . .       x x x . . .              . . x x x x           x . x . . .
    x x x x . .       . x x x . .              . . x x x x           x . . x . .
    x x x x x .       . . x x x .              . . x x x x           x . . . x .
    x x x x x x       . . . x x x              . . x x x x           x . . . . x
                                                            (global_tokens(1) | diagonal)

Modules: ``geometry`` (Geometry, Tile, key ranges), ``algebra`` (the Mask protocol, ``&``
and ``|``), ``windows`` (causal, sliding_window), ``layouts`` (global_tokens, documents,
block_sparse, bigbird), ``arrays`` (key_padding, segments, dense), ``validation`` (the
checks they share).
"""

from __future__ import annotations

from .algebra import Mask
from .arrays import dense, key_padding, segments
from .geometry import Geometry, Tile, clip_ranges
from .layouts import bigbird, block_sparse, documents, global_tokens
from .validation import check_position_range
from .windows import causal, sliding_window, window_sides

__all__ = [
    "Geometry",
    "Mask",
    "Tile",
    "bigbird",
    "block_sparse",
    "causal",
    "check_position_range",
    "clip_ranges",
    "dense",
    "documents",
    "global_tokens",
    "key_padding",
    "segments",
    "sliding_window",
    "window_sides",
]
