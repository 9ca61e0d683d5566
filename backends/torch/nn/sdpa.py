"""``ScaledDotProductAttention``: attention over given heads as a PyTorch module.

The math is :func:`attnkit.scaled_dot_product_attention`; the module holds the options
and draws dropout from a ``torch.Generator`` (:func:`dropout_generator`, shared with
``attnkit.backends.torch.nn.multihead``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

import attnkit as ak
from attnkit.errors import ParameterError

__all__ = ["ScaledDotProductAttention", "dropout_generator", "generator_or_seeded"]


def generator_or_seeded(
    generator: torch.Generator | None, seed: int | None = None, device: Any = None
) -> torch.Generator:
    """``generator`` if given, else a fresh one on ``device`` seeded with ``seed``, or with
    a draw from torch's global RNG (so ``torch.manual_seed`` makes it reproducible, as
    with ``nn.Dropout`` and ``nn.Linear``'s initialization)."""
    if generator is not None:
        return generator
    if seed is None:
        seed = int(torch.randint(0, 2**62, (1,)).item())
    return torch.Generator(device=torch.device(device or "cpu")).manual_seed(int(seed))


def dropout_generator(module: nn.Module, like: torch.Tensor) -> torch.Generator:
    """The module's generator if set, else a fresh one on ``like``'s device seeded from
    torch's global RNG."""
    return generator_or_seeded(getattr(module, "generator", None), device=like.device)


class ScaledDotProductAttention(nn.Module):
    """Attention over given heads, ``softmax(q k^T * scale + mask) v``, as a module.

    ``forward(query (..., Hq, L, E), key (..., Hkv, S, E), value (..., Hkv, S, Ev),
    attn_mask=None, need_weights=True)`` returns ``(output (..., Hq, L, Ev), weights
    (..., Hq, L, S) or None)``. ``attn_mask`` is bool (True = may attend), additive float,
    or an :mod:`attnkit.masks` mask. Unlike the textbook module it replaces: fully masked
    rows give 0 (not NaN), dropout runs only in training mode, and the weights returned
    are the ones applied.
    """

    def __init__(
        self,
        dropout: float = 0.0,
        *,
        scale: float | None = None,
        is_causal: bool = False,
        window: Any = None,
        enable_gqa: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
            raise ParameterError(f"dropout must be a probability in [0, 1), got {dropout!r}.")
        self.dropout = float(dropout)
        self.scale, self.is_causal, self.window = scale, is_causal, window
        self.enable_gqa, self.generator = enable_gqa, generator

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attn_mask: Any = None,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        p = self.dropout if self.training else 0.0
        result = ak.scaled_dot_product_attention(
            query,
            key,
            value,
            attn_mask,
            p,
            self.is_causal,
            self.scale,
            self.enable_gqa,
            window=self.window,
            return_weights=need_weights,
            rng=dropout_generator(self, query) if p > 0 else None,
        )
        return (result.output, result.weights) if need_weights else (result, None)

    def extra_repr(self) -> str:
        return f"dropout={self.dropout}, is_causal={self.is_causal}, window={self.window}"
