"""Translators, both ways, between attnkit's masks and windows and other libraries' names.

attnkit's ``window=(left, right)`` lets query i see keys i-left .. i+right (None: that
side unbounded; an int W means (W, W)). Elsewhere::

    FlashAttention   window_size=(left, right), -1 for an unbounded side
    jax.nn           local_window_size=(left, right) (an int W is (W, W))
    Hugging Face     sliding_window=W with causal: window=(W - 1, 0)

FlexAttention's: :mod:`attnkit.testing.translate_torch`. What cannot be expressed raises
a :class:`~attnkit.errors.ParameterError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import masks
from ..errors import ParameterError
from ..masks import window_sides

__all__ = [
    "from_flash_window_size",
    "from_hf_sliding_window",
    "from_jax_key_value_seq_lengths",
    "from_jax_local_window_size",
    "to_flash_window_size",
    "to_hf_sliding_window",
    "to_jax_key_value_seq_lengths",
    "to_jax_local_window_size",
]

Window = int | tuple[int | None, int | None]


def to_flash_window_size(window: Window | None) -> tuple[int, int]:
    """attnkit's ``window`` as FlashAttention's ``window_size``: (left, right) with -1 for
    an unbounded side (None, no window, is (-1, -1))."""
    if window is None:
        return (-1, -1)
    left, right = window_sides(window)
    return (-1 if left is None else left, -1 if right is None else right)


def from_flash_window_size(window_size: Sequence[int]) -> tuple[int | None, int | None] | None:
    """FlashAttention's ``window_size`` (left, right), -1 unbounded, as attnkit's
    ``window`` (None for (-1, -1): no window)."""
    if not (isinstance(window_size, Sequence) and len(window_size) == 2):
        raise ParameterError(
            f"window_size must be a pair (left, right), got {window_size!r}; FlashAttention "
            "uses (-1, -1) for no window."
        )
    sides = []
    for side in window_size:
        if not isinstance(side, int | np.integer) or side < -1:
            raise ParameterError(
                f"window_size sides must be ints >= -1 (-1: unbounded), got {window_size!r}."
            )
        sides.append(None if side == -1 else int(side))
    return None if sides == [None, None] else (sides[0], sides[1])


def to_jax_local_window_size(window: Window) -> tuple[int, int]:
    """attnkit's ``window`` as ``jax.nn.dot_product_attention``'s ``local_window_size``
    (the same (left, right), measured from the top-left like attnkit's default)."""
    left, right = window_sides(window)
    if left is None or right is None:
        raise ParameterError(
            f"window={window!r} has an unbounded side, which jax.nn's local_window_size "
            "cannot express; give both sides (at least L + S covers every key), or leave "
            "that side to is_causal=True for (None, 0)."
        )
    return (left, right)


def from_jax_local_window_size(local_window_size: int | Sequence[int]) -> tuple[int, int]:
    """``local_window_size`` (an int W is (W, W)) as attnkit's ``window``."""
    left, right = window_sides(
        local_window_size if isinstance(local_window_size, int) else tuple(local_window_size)
    )
    if left is None or right is None:
        raise ParameterError(
            f"local_window_size={local_window_size!r} has a None side; jax.nn takes ints."
        )
    return (left, right)


def to_hf_sliding_window(window: Window) -> int:
    """attnkit's ``window=(W - 1, 0)`` as Hugging Face's ``sliding_window=W`` (applied
    together with causal, as transformers does)."""
    left, right = window_sides(window)
    if left is None or right != 0:
        raise ParameterError(
            f"window={window!r} is not a causal sliding window: Hugging Face's "
            "sliding_window=W means window=(W - 1, 0) (query i sees keys i-W+1 .. i)."
        )
    return left + 1


def from_hf_sliding_window(sliding_window: int) -> tuple[int, int]:
    """Hugging Face's ``sliding_window=W`` as attnkit's ``window=(W - 1, 0)`` (pass it with
    ``is_causal=True`` or alone: its right side is already 0)."""
    if isinstance(sliding_window, bool) or not isinstance(sliding_window, int | np.integer):
        raise ParameterError(f"sliding_window must be an int >= 1, got {sliding_window!r}.")
    if sliding_window < 1:
        raise ParameterError(
            f"sliding_window must be >= 1 (it counts the query itself), got {sliding_window}."
        )
    return (int(sliding_window) - 1, 0)


def to_jax_key_value_seq_lengths(mask: Any, S: int) -> np.ndarray:
    """A key-padding mask as ``key_value_seq_lengths`` (B,) int32: ``mask`` an attnkit
    mask (e.g. ``masks.key_padding(lengths)``) or a bool array of shape (B, 1, 1, S),
    True on a prefix of each batch entry's keys."""
    if isinstance(mask, masks.Mask):
        dense = np.asarray(mask.materialize(np, 1, S))
    else:
        dense = np.asarray(mask)
    if dense.dtype != np.bool_ or dense.ndim != 4 or dense.shape[1:3] != (1, 1):
        raise ParameterError(
            f"key_value_seq_lengths needs a key-padding mask (B, 1, 1, S), got "
            f"{getattr(dense, 'dtype', type(dense))} {getattr(dense, 'shape', '')}; build one "
            "with attnkit.masks.key_padding(lengths)."
        )
    keys = dense[:, 0, 0, :]  # (B, S)
    lengths = keys.sum(axis=-1)
    prefix = np.arange(keys.shape[-1])[None, :] < lengths[:, None]
    if not np.array_equal(keys, prefix):
        raise ParameterError(
            "the mask is not key padding: some batch entry allows a key after a masked one; "
            "key_value_seq_lengths can only express a prefix of valid keys."
        )
    return lengths.astype(np.int32)


def from_jax_key_value_seq_lengths(lengths: Any) -> masks.Mask:
    """``key_value_seq_lengths`` (B,) as ``masks.key_padding(lengths)``."""
    return masks.key_padding([int(n) for n in np.asarray(lengths).reshape(-1)])
