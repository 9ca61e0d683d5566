"""Structured attention masks that tell the executor which key blocks each query block needs.

A :class:`Mask` says, for query rows ``[q_lo, q_hi)``, which key columns may hold an
allowed pair (static ints, so whole key blocks are never touched) and which pairs inside
them are allowed (:mod:`.algebra`), so work grows with the attended pairs, not L x S.
Masks combine with ``&`` and ``|``; pass one as ``attn_mask=``.

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

Modules: ``windows`` (causal, sliding_window), ``layouts`` (global_tokens, documents,
block_sparse, bigbird), ``arrays`` (key_padding, segments, dense).

Example
-------

.. code-block:: python

    import attnkit as ak
    from attnkit import masks

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 8, 512, 64), dtype=np.float32) for _ in range(3))
    m = masks.sliding_window((128, 0)) | masks.global_tokens(4)  # causal window + globals
    m = m & masks.key_padding([512, 300])  # per-batch lengths
    out = ak.scaled_dot_product_attention(q, k, v, attn_mask=m)
    m.materialize(np, 512, 512)  # the dense bool array (..., L, S), in namespace np
    m.density(np, 512, 512)  # fraction of allowed pairs

The other kinds: ``causal("bottom_right")``, ``documents([100, 412])`` (packed sequences,
static lengths), ``segments(q_ids, kv_ids)`` (the same from id arrays, traceable),
``block_sparse(layout, (64, 64))``, ``bigbird(L, block_size=64, seed=0)`` and
``dense(bool_array)``.

What each mask means and refuses (every check raises before any work, naming the mask,
the sizes and the fix):

- positions are absolute (`q_offset + i`, `kv_offset + j`). Causal, windows,
  `global_tokens` and `key_padding` compare positions, so negative offsets mean what
  they say. `documents`, `block_sparse` and `bigbird` are laid out from position 0 and
  refuse negative offsets; `block_sparse` positions past the layout are masked;
  `documents` lengths must sum to the sequence length (at offsets 0) or cover
  `q_offset + L` and `kv_offset + S` (piece by piece).
- `key_padding` lengths may not exceed `kv_offset + S`; `segments` ids must have L and
  S entries on their last axis; `dense` takes a bool array only (pass a float additive
  mask as `attn_mask` directly) whose last two axes broadcast to (L, S); arrays a mask
  holds must come from the query's library and device.
- masks comparing absolute positions refuse offsets beyond the index dtype (32-bit in
  JAX without x64); windows work at any offset.

Masks holding arrays work under `jax.jit`; masks given by Python ints also let whole key
blocks be skipped. Score modifiers: :mod:`attnkit.score_mods`. The example runs on
NumPy arrays, with NumPy imported as ``np``.
"""

from __future__ import annotations

from .algebra import Mask
from .arrays import dense, key_padding, segments, tile_any
from .geometry import EMPTY, FULL, PARTIAL, Geometry, LoopTile, Tile, clip_ranges
from .layouts import bigbird, block_sparse, documents, global_tokens
from .validation import check_position_range
from .windows import causal, sliding_window, window_sides

__all__ = [
    "EMPTY",
    "FULL",
    "PARTIAL",
    "Geometry",
    "LoopTile",
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
    "tile_any",
    "window_sides",
]
