"""Blocked exact attention: the executor behind ``impl="generic"`` and ``impl="auto"``.

A call's plan (:mod:`attnkit.plan`) picks one of two strategies, both here:

**Tiles** (where the backend compiles a loop, ``Backend.map_blocks``: ``jax.lax.scan``).
The call's L x S pairs are a table of (query block, key block) tiles, full, partial or
skipped (:mod:`.table`, FlexAttention's ``BlockMask``), built from the structure's
static ints or read at run time from a mask's data (segment ids, padding lengths, an
``attn_mask`` array). :mod:`.tile_loop` runs every attended tile through one body per
kind of tile, each tile's piece merged into its query rows by the online softmax, and
:mod:`.tile_backward` loops over the same tiles. Every call form (masks, score mods,
dropout, weights, lse, GQA, offsets, both alignments) is then one program whose size
does not depend on L.

**Row blocks** (a Python loop: NumPy, array-api-strict, eager PyTorch). Query blocks of
``rows`` one at a time (:mod:`.executor`), each reading the key columns its structure
allows (:mod:`.tiles`) through :mod:`.block`'s formula or the backend's block kernel,
a window's interior in one kernel call (:mod:`.translated_runs`), and the backward pass
block by block (:mod:`.backward`).

Read :mod:`.block` first (one block: the plain formula and its exact variants), then
:mod:`.executor`, :mod:`.table` and :mod:`.tile_loop`.
"""

from __future__ import annotations

from .executor import blocked_attention

__all__ = ["blocked_attention"]
