"""Forward+backward of attention on PyTorch, for ``attnkit bench --backward``.

The baselines are torch SDPA (``torch SDPA``) and, for a window, SDPA with the band as a
dense (L, S) bool mask (``torch SDPA band mask``); attnkit is passed in as a function.
Gradients come from ``torch.autograd.grad`` of the output against an upstream gradient
``d_out`` with respect to ``q``, ``k``, ``v`` (leaves that require grad), so attnkit's
``autograd.Function`` (or torch SDPA's own backward, where ``impl="auto"`` keeps it) runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .peers_torch import SDPA, SDPA_BAND, _band

__all__ = ["baseline", "forward", "gradient"]


def baseline(
    name: str, *, L: int, S: int, window: tuple[int, int] | None, scale: float
) -> Callable:
    """``fn(q, k, v) -> out`` (B, H, L, E) of baseline ``name``; a window's band mask is
    built here, once (untimed)."""
    import torch.nn.functional as F

    if name == SDPA and window is None:
        return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=scale)
    if name == SDPA_BAND and window is not None:
        band = _band(L, S, window, "cpu")  # (L, S)
        return lambda q, k, v: F.scaled_dot_product_attention(
            q, k, v, attn_mask=band.to(q.device), scale=scale
        )
    raise ValueError(f"no PyTorch gradient baseline {name!r} for window={window!r}")


def _leaves(q: Any, k: Any, v: Any) -> tuple[Any, Any, Any]:
    return tuple(t.detach().clone().requires_grad_(True) for t in (q, k, v))  # type: ignore[return-value]


def forward(fn: Callable, q: Any, k: Any, v: Any) -> Callable[[], Any]:
    """A zero-argument callable: the forward of a training step (``q``, ``k``, ``v``
    require grad, so what the backward needs is saved), its output."""
    leaves = _leaves(q, k, v)
    return lambda: fn(*leaves)


def gradient(fn: Callable, q: Any, k: Any, v: Any, d_out: Any) -> Callable[[], Any]:
    """A zero-argument callable: forward, then ``(dq, dk, dv)`` by ``torch.autograd.grad``
    with upstream gradient ``d_out`` (B, H, L, Ev)."""
    import torch

    leaves = _leaves(q, k, v)

    def step() -> Any:
        out = fn(*leaves)
        return torch.autograd.grad(out, leaves, d_out)

    return step
