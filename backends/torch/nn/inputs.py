"""PyTorch's module conventions for inputs and masks, checked and turned into attnkit's.

``torch.nn.MultiheadAttention``'s bool masks mean True = NOT allowed; attnkit's, True =
may attend. The checks raise attnkit's typed errors before any work.
"""

from __future__ import annotations

from typing import Any

import torch

from attnkit.checks import check_flag
from attnkit.errors import ArgumentTypeError, DTypeError, ShapeError

__all__ = [
    "batched_masks",
    "check_forward",
    "check_torch_mask",
    "check_width",
    "from_torch_mask",
]


def check_forward(
    module: Any, tensors: dict[str, Any], masks: dict[str, Any], flags: dict[str, Any]
) -> None:
    """``MultiheadAttention.forward``'s arguments: flags real bools, query/key/value
    tensors with the module's embed_dim/kdim/vdim features, masks bool or float."""
    for name, flag in flags.items():
        check_flag(name, flag)
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise ArgumentTypeError(
                f"{name} must be a torch.Tensor, got {type(t).__module__}.{type(t).__name__}."
            )
    widths = {"query": (module.embed_dim, "embed_dim"), "key": (module.kdim, "kdim")}
    widths["value"] = (module.vdim, "vdim")
    for name, t in tensors.items():
        check_width(name, t, *widths[name])
    for name, mask in masks.items():
        check_torch_mask(name, mask)


def batched_masks(
    module: Any,
    key_padding_mask: Any,
    attn_mask: Any,
    sizes: tuple[int, int, int],
    given: tuple[Any, Any],
    unbatched: bool,
) -> tuple[Any, Any]:
    """(key_padding_mask (B, S), attn_mask (L, S) | (B, Hq, L, S)) in attnkit's convention,
    checked against the batch B, query length L and key length S (``sizes``); ``given``
    holds query and key as the module got them (for the message)."""
    B, L, S = sizes
    if key_padding_mask is not None and tuple(key_padding_mask.shape) != (B, S):
        want = f"({S},) for unbatched inputs" if unbatched else f"(batch, S) = ({B}, {S})"
        got = tuple(key_padding_mask.shape[1:] if unbatched else key_padding_mask.shape)
        layout = " (batch_first)" if module.batch_first else " (L, batch, D)"
        raise ShapeError(
            f"key_padding_mask must be {want} (True = padding, ignored), got {got}; "
            f"query {tuple(given[0].shape)}, key {tuple(given[1].shape)}{layout}."
        )
    kpm = from_torch_mask(key_padding_mask)
    am = from_torch_mask(attn_mask)
    if am is not None and am.dim() == 3:
        if am.shape[0] != B * module.num_heads:
            raise ShapeError(
                f"a 3-D attn_mask must be (batch * num_heads, L, S) = ({B * module.num_heads}, "
                f"{L}, {S}), got {tuple(attn_mask.shape)}."
            )
        am = am.reshape(B, module.num_heads, *am.shape[1:])  # (B, Hq, L, S)
    return kpm, am


def check_width(name: str, x: torch.Tensor, width: int, what: str) -> None:
    """``x``'s last axis must be the module's ``what`` (embed_dim, kdim or vdim)."""
    if x.dim() < 1 or x.shape[-1] != width:
        raise ShapeError(
            f"{name} has {x.shape[-1] if x.dim() else 0} features on its last axis but the "
            f"module has {what}={width}: {name} {tuple(x.shape)}; pass {name} with {width} "
            f"features, or build the module with {what}={x.shape[-1] if x.dim() else 0}."
        )


def check_torch_mask(name: str, mask: Any) -> None:
    """PyTorch's convention: a bool mask (True = NOT allowed) or a float one (added)."""
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor):
        raise ArgumentTypeError(
            f"{name} must be None or a torch.Tensor, got {type(mask).__module__}."
            f"{type(mask).__name__}; convert it first, e.g. torch.as_tensor({name})."
        )
    if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
        raise DTypeError(
            f"{name} has dtype {mask.dtype} {tuple(mask.shape)}; expected bool (True = padding "
            f"/ not allowed, as torch.nn.MultiheadAttention) or float (added to the scores): "
            f"cast it, e.g. {name}.bool() for a 0/1 mask whose 1 marks what to ignore."
        )


def from_torch_mask(mask: torch.Tensor | None) -> torch.Tensor | None:
    """PyTorch's module convention (bool True = NOT allowed; float added) to attnkit's
    (bool True = may attend; float added)."""
    if mask is None:
        return None
    return ~mask if mask.dtype == torch.bool else mask
