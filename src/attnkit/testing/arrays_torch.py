"""PyTorch tensors to and from float64 NumPy, for :mod:`attnkit.testing.arrays`."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["device_of", "from_numpy", "to_numpy", "vjp"]


def device_of(x: Any) -> str:
    return str(x.device)


def to_numpy(x: Any) -> np.ndarray:
    x = x.detach()
    if x.dtype == torch.bool:
        return x.cpu().numpy()
    return x.to("cpu", torch.float64).numpy()


def from_numpy(a: np.ndarray, dtype: str, device: Any, transposed: bool) -> Any:
    kind = getattr(torch, dtype)
    if transposed and a.ndim >= 2:
        t = torch.from_numpy(np.ascontiguousarray(np.swapaxes(a, -1, -2)))
        return t.to(device or "cpu", kind).transpose(-1, -2)
    return torch.from_numpy(np.array(a)).to(device or "cpu", kind)


def vjp(fn: Any, qkv: list[Any], kwargs: dict[str, Any], grad_out: np.ndarray) -> list[Any]:
    """float64 NumPy gradients of sum(fn(q, k, v, **kwargs) * grad_out) by autograd (None
    for an input no gradient reached)."""
    leaves = [x.detach().requires_grad_(True) for x in qkv]
    out = fn(*leaves, **kwargs)
    out.backward(torch.from_numpy(grad_out).to(out.device, out.dtype))
    return [None if x.grad is None else to_numpy(x.grad) for x in leaves]
