"""PyTorch's own attention, for ``attnkit bench`` and ``attnkit verify`` to compare with.

Baselines of ``attnkit bench``:

``torch SDPA``               ``F.scaled_dot_product_attention`` (the fused CPU/GPU kernel).
``torch SDPA band mask``     the same with the window as a dense (L, S) bool mask.
``FlexAttention compiled``   ``flex_attention`` under ``torch.compile``, a block mask.
``torch textbook``           softmax(Q K^T / sqrt(E)) V in plain tensor operations.

The interface every framework's ``peers`` module shares is described in
``attnkit.app.bench.peers_numpy``. ``attnkit verify`` runs PyTorch's attention functions
through ``attnkit.app.bench.peers_exact_torch``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = [
    "FLEX",
    "MATERIALIZING",
    "SDPA",
    "SDPA_BAND",
    "TEXTBOOK",
    "baselines",
    "build",
    "forward_backward",
    "jit",
]

SDPA = "torch SDPA"
SDPA_BAND = "torch SDPA band mask"
FLEX = "FlexAttention compiled"
TEXTBOOK = "torch textbook"
MATERIALIZING = (TEXTBOOK,)


def baselines(kind: str, *, flex: bool = False) -> tuple[str, ...]:
    """The baselines that apply to a case of ``kind``; FlexAttention only when ``flex``."""
    if kind in ("dense", "decode", "causal", "padded"):
        return (SDPA, TEXTBOOK)
    if kind == "window":
        return (SDPA_BAND, FLEX) if flex else (SDPA_BAND,)
    return ()


def jit(fn: Callable[..., Any]) -> Callable[..., Any]:
    """attnkit runs eagerly on PyTorch (no compile step): ``fn`` itself."""
    return fn


def _band(L: int, S: int, window: tuple[int, int], device: Any) -> Any:
    """(L, S) bool: True where i - left <= j <= i + right (key j within query i's window)."""
    import torch

    offset = torch.arange(S, device=device)[None, :] - torch.arange(L, device=device)[:, None]
    return (offset >= -window[0]) & (offset <= window[1])  # (L, S)


def build(
    name: str,
    q: Any,
    k: Any,
    v: Any,
    *,
    window: tuple[int, int] | None,
    scale: float,
    causal: bool = False,
    mask: Any = None,
) -> Callable[[], Any]:
    """A zero-argument callable computing baseline ``name`` on ``q``, ``k``, ``v``."""
    import torch
    import torch.nn.functional as F

    if name == SDPA and window is None:
        return lambda: F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal, scale=scale
        )
    if name == TEXTBOOK and window is None:
        allowed = mask
        if causal:
            band = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()  # (L, S)
            allowed = band if allowed is None else allowed & band

        def textbook() -> Any:  # the whole (B, H, L, S) score matrix in memory
            s = (q @ k.transpose(-2, -1)) * scale
            if allowed is not None:
                s = s.masked_fill(~allowed, -torch.inf)
            return torch.softmax(s, dim=-1) @ v

        return textbook
    if name == SDPA_BAND and window is not None:
        mask = _band(q.shape[-2], k.shape[-2], window, q.device)  # (L, S), built untimed
        return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    if name == FLEX and window is not None:
        return _flex(q, k, v, window, scale)
    raise ValueError(f"no PyTorch baseline {name!r} for window={window!r}")


def _flex(q: Any, k: Any, v: Any, window: tuple[int, int], scale: float) -> Callable[[], Any]:
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    left, right = window

    def band(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        return (kv_idx >= q_idx - left) & (kv_idx <= q_idx + right)

    block_mask = create_block_mask(band, None, None, q.shape[-2], k.shape[-2], device=str(q.device))
    compiled = torch.compile(flex_attention)
    return lambda: compiled(q, k, v, block_mask=block_mask, scale=scale)


def forward_backward(fn: Callable[..., Any], q: Any, k: Any, v: Any) -> None:
    """Run ``fn(q, k, v)`` and back-propagate; raise unless every gradient is finite."""
    import torch

    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    out = fn(q, k, v)  # (B, H, L, E)
    out.backward(torch.ones_like(out))
    for label, t in (("query", q), ("key", k), ("value", v)):
        if t.grad is None or not bool(torch.isfinite(t.grad).all()):
            raise FloatingPointError(f"the gradient of {label} is missing or not finite")
