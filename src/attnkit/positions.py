"""Causal and sliding-window structure from absolute positions.

Query row i has absolute position ``qpos = q_start + i`` and key column j has
``kpos = kv_start + j`` (see :class:`attnkit._validate.Problem`: ``q_start`` already holds
``q_offset`` and the causal-alignment shift). Then::

    causal:          kpos <= qpos
    window (l, r):   qpos - l <= kpos <= qpos + r      (None = unbounded side)

Both alignments for L = 2 queries, S = 4 keys, causal (x = may attend)::

    top_left (PyTorch)      bottom_right (FlashAttention, decoding)
        k0 k1 k2 k3             k0 k1 k2 k3
    q0  x  .  .  .          q0  x  x  x  .
    q1  x  x  .  .          q1  x  x  x  x

Because the structure is a function of positions, a block of rows needs only the key
columns between the smallest and the largest position its rows can see: that range is
computed here statically (Python ints), so whole blocks of keys are never touched.
"""

from __future__ import annotations

from typing import Any

__all__ = ["allowed_by_position", "key_range"]


def key_range(
    q_lo: int,
    q_hi: int,
    S: int,
    *,
    q_start: int,
    kv_start: int,
    causal: bool,
    window: tuple[int | None, int | None] | None,
) -> tuple[int, int]:
    """Key columns [lo, hi) that rows [q_lo, q_hi) can attend; lo >= hi when none."""
    lo, hi = 0, S
    q_min, q_max = q_start + q_lo, q_start + q_hi - 1
    if causal:
        hi = min(hi, q_max - kv_start + 1)
    if window is not None:
        left, right = window
        if left is not None:
            lo = max(lo, q_min - left - kv_start)
        if right is not None:
            hi = min(hi, q_max + right - kv_start + 1)
    return lo, hi


def allowed_by_position(
    xp: Any,
    device: Any,
    q_lo: int,
    q_hi: int,
    k_lo: int,
    k_hi: int,
    *,
    q_start: int,
    kv_start: int,
    causal: bool,
    window: tuple[int | None, int | None] | None,
) -> Any:
    """Bool (q_hi - q_lo, k_hi - k_lo): True where row i may attend column j.

    Returns None when every pair in the block is allowed (no array is built).
    """
    q_min, q_max = q_start + q_lo, q_start + q_hi - 1
    k_min, k_max = kv_start + k_lo, kv_start + k_hi - 1
    left, right = window if window is not None else (None, None)
    need_causal = causal and k_max > q_min
    need_left = left is not None and k_min < q_max - left
    need_right = right is not None and k_max > q_min + right
    if not (need_causal or need_left or need_right):
        return None
    qpos = xp.arange(q_start + q_lo, q_start + q_hi, device=device)[:, None]  # (Bq, 1)
    kpos = xp.arange(kv_start + k_lo, kv_start + k_hi, device=device)[None, :]  # (1, Sk)
    allowed = None
    if need_causal:
        allowed = kpos <= qpos
    if need_left:
        cond = kpos >= qpos - left
        allowed = cond if allowed is None else allowed & cond
    if need_right:
        cond = kpos <= qpos + right
        allowed = cond if allowed is None else allowed & cond
    return allowed  # (Bq, Sk)
