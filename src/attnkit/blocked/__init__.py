"""Blocked exact attention: the executor behind ``impl="generic"`` and ``impl="auto"``.

A call's plan (:mod:`attnkit.plan`) picks one of two strategies:

**Tiles** (where the backend compiles a loop, ``Backend.map_blocks``: ``jax.lax.scan``):
the call's (query block, key block) tiles, full, partial or skipped (:mod:`.table`), run
through one body per kind of tile (:mod:`.tile_loop`), merged by the online softmax;
:mod:`.tile_backward` loops over the same tiles. One program whatever L.

**Row blocks** (a Python loop: NumPy, array-api-strict, eager PyTorch): query blocks one
at a time (:mod:`.executor`), each reading the key columns its structure allows through
:mod:`.block`'s formula or the backend's kernel; the backward block by block
(:mod:`.backward`).

Read :mod:`.block` first.
"""

from __future__ import annotations

from .executor import blocked_attention

__all__ = ["blocked_attention"]
