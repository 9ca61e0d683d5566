"""transformers' mask function for attnkit, registered by ``attnkit.backends.torch.hf``.

Without a registered mask function transformers passes no mask and padded batches come
out wrong. This one returns sdpa's bool mask (B, 1, L, S), True = may attend, or None
where attention is exactly causal with the last query on the last key and nothing else
(no padding, window or chunk), or full without padding: then
:func:`attnkit.backends.torch.hf.attention` computes structured attention.
"""

from __future__ import annotations

from typing import Any

__all__ = ["mask"]


def mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset: Any = 0,
    kv_offset: int = 0,
    mask_function: Any = None,
    attention_mask: Any = None,
    local_size: int | None = None,
    allow_is_causal_skip: bool = True,
    allow_is_bidirectional_skip: bool = False,
    **kwargs: Any,
) -> Any:
    """transformers' mask function for attnkit: sdpa's bool mask (B, 1, L, S), True = may
    attend, or None where the attention is exactly causal with the last query on the last
    key (q_offset + L == kv_offset + S), with no padding and no window or chunk in reach,
    which ``hf.attention`` then computes as structured ``bottom_right`` causal attention.

    sdpa also skips the mask for a static cache's prefill (top-left causal over a longer
    buffer); attnkit materializes it there, so None always means bottom-right.
    """
    from transformers.masking_utils import causal_mask_function, sdpa_mask

    if allow_is_causal_skip and _plainly_causal(
        q_length, kv_length, q_offset, kv_offset, attention_mask, local_size
    ):
        return None
    return sdpa_mask(
        batch_size=batch_size,
        q_length=q_length,
        kv_length=kv_length,
        q_offset=q_offset,
        kv_offset=kv_offset,
        mask_function=causal_mask_function if mask_function is None else mask_function,
        attention_mask=attention_mask,
        local_size=local_size,
        allow_is_causal_skip=False,
        allow_is_bidirectional_skip=allow_is_bidirectional_skip,
        **kwargs,
    )


def _plainly_causal(
    L: int, S: int, q_offset: Any, kv_offset: Any, padding: Any, local_size: int | None
) -> bool:
    """Whether the causal mask equals attnkit's bottom_right causal on these keys."""
    import torch

    if torch.compiler.is_compiling():
        return False  # reading offsets or padding values would break the graph
    q_offset, kv_offset = int(q_offset), int(kv_offset)
    if q_offset + L != kv_offset + S:
        return False  # a static cache's buffer, or queries not at the end of the keys
    if local_size is not None and not (kv_offset == 0 and S < local_size):
        return False  # a window or chunk boundary may be in reach
    if padding is None:
        return True
    columns = padding[:, kv_offset : kv_offset + S]  # (B, S) bool, True = a real token
    return columns.shape[-1] == S and bool(columns.all())
