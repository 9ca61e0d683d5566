"""Blocked exact attention: the executor behind ``impl="generic"`` and ``impl="auto"``.

Read it in this order: :mod:`.executor` (the loop over query blocks), :mod:`.block` (one
block: the plain formula and its exact variants), :mod:`.tiles` (which key columns a
block reads and which pairs are allowed), :mod:`.operands` (dtypes, the GQA layout, the
NaN guard), :mod:`.shortcuts`, :mod:`.cost` (block size, recomputation) and
:mod:`.translated_runs` (a window's interior in one kernel call).

Loops the framework runs
------------------------

**Loops the framework runs.** How the blocks are iterated is the backend's
(`Backend.map_blocks`); the block's formula stays written once. The blocks of one
shape (a window's interior, and every whole block of unstructured attention) run as
one body: a Python loop on NumPy, array-api-strict and PyTorch, a `jax.lax.scan` over
`lax.dynamic_slice`s with a `jax.checkpoint`ed body on JAX, forward and backward (key
gradients ride the scan's carry). Under `jax.jit` a window-256 or a dense call lowers
to the same program at every L (`tests/test_map_blocks.py` counts its StableHLO lines
at L = 2048 and 8192; the window's edge blocks, a constant number, stay unrolled), and
`attnkit.explain` names the loop. Causal attention has no two query blocks alike, so on
JAX it loops over (query block, key block) pairs instead (`attnkit.blocked.pairs`): the
whole tiles below the diagonal in one loop without a mask, the diagonal's tiles in
another, each pair's (out, lse) merged into its rows by log-sum-exp, and the backward
pass over the same pairs. A jitted causal forward+backward is then one program at every
L: 1,058 StableHLO lines and a 2.3 s compile at both L = 4096 and L = 16384 (B = 1, 8
heads of 64, float32, this machine unloaded), where unrolled blocks gave 23,275 lines
and a 203 s compile already at L = 8192 (4 heads). Tiles are 256 x 256 (a step at
L = 8192 took 9.0 s in tiles of 32 rows, 7.0 s of 128, 6.3 s of 256, 7.0 s of 512);
`attnkit bench --backward` prints the compile at two lengths (target 5's causal lines).
NumPy, array-api-strict and PyTorch keep one block per query block (a Python loop
gains nothing from pairs).

"""

from __future__ import annotations

from .executor import blocked_attention

__all__ = ["blocked_attention"]
