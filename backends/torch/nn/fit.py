"""How the drop-in modules fit torch's own machinery: autocast, nested tensors, and the
native fast path of ``nn.TransformerEncoderLayer``.

- **autocast**: inputs and parameters in the autocast dtype (float64 left alone),
  attnkit's 16-bit path underneath (float32 accumulation), the result in that dtype,
  as ``nn.MultiheadAttention``.
- **nested tensors** (``nn.TransformerEncoder`` in eval mode): padded, attended with the
  padding masked, and returned nested with the same lengths.
"""

from __future__ import annotations

from typing import Any

import torch

import attnkit as ak
from attnkit.errors import ParameterError

__all__ = ["autocast_dtype", "cast_params", "from_nested", "to_nested"]


def autocast_dtype(x: torch.Tensor) -> torch.dtype | None:
    """The dtype torch's autocast would compute ``x`` in here, or None (autocast off for
    ``x``'s device, or ``x`` not an eligible float32/16-bit tensor)."""
    device = x.device.type
    if not torch.is_autocast_enabled(device) or not x.is_floating_point():
        return None
    if x.dtype == torch.float64:
        return None  # autocast leaves float64 alone
    dtype = torch.get_autocast_dtype(device)
    return dtype if dtype != x.dtype else None


def cast_params(params: ak.MultiHeadParams, dtype: torch.dtype) -> ak.MultiHeadParams:
    """Every parameter in ``dtype`` (autograd intact, as autocast's casts are)."""
    return ak.MultiHeadParams(*(None if p is None else p.to(dtype) for p in params))


def from_nested(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, masks: dict[str, Any]
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """A nested (B, *, D) self-attention input as (padded (B, N, D), key_padding_mask
    (B, N) with True = padding, the B lengths). Only what torch's encoder passes: the
    same nested tensor as query, key and value, and no masks (the nesting is the mask)."""
    if key is not query or value is not query:
        raise ParameterError(
            "a nested-tensor query works as self-attention only (key and value the same "
            "nested tensor, as nn.TransformerEncoder passes); pad the batch and pass a "
            "key_padding_mask instead."
        )
    given = [name for name, mask in masks.items() if mask is not None]
    if given:
        raise ParameterError(
            f"a nested-tensor query takes no {' or '.join(given)}: the nesting says which "
            "positions exist; pad the batch and pass the masks with it instead."
        )
    lengths = [int(t.shape[0]) for t in query.unbind()]
    padded = torch.nested.to_padded_tensor(query, 0.0)  # (B, N, D), N = max length
    positions = torch.arange(padded.shape[1], device=padded.device)
    padding = positions[None, :] >= torch.tensor(lengths, device=padded.device)[:, None]
    return padded, padding, lengths  # padding: (B, N), True = not a token


def to_nested(out: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """(B, N, D) padded output back as a nested tensor of rows ``lengths``."""
    return torch.nested.as_nested_tensor([out[b, :n] for b, n in enumerate(lengths)])
