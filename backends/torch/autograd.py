"""attnkit's backward pass as a ``torch.autograd.Function``.

The math gives a forward that returns ``(out, saved)`` and a backward from ``saved``
(:func:`attnkit._dispatch.differentiable_attention`); this wires them into autograd, saving
the inputs and ``saved`` (the output and lse: O(L) beyond the inputs) and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["records_gradients", "vjp_function"]


def records_gradients(*xs: Any) -> bool:
    """Whether autograd records a call on ``xs``, outside torch.func's transforms (under
    which the plain graph is differentiated instead)."""
    if not torch.is_grad_enabled():
        return False
    if not any(isinstance(x, torch.Tensor) and x.requires_grad for x in xs):
        return False
    active = getattr(torch._C, "_are_functorch_transforms_active", None)
    return not (active is not None and active())


def vjp_function(forward: Callable[..., Any], backward: Callable[..., Any], *arrays: Any) -> Any:
    """``forward(*arrays)[0]``, differentiated by ``backward`` (see the module docstring)."""
    return _AttentionFunction.apply(forward, backward, len(arrays), *arrays)


class _AttentionFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, forward: Any, backward: Any, n: int, *arrays: Any) -> Any:
        out, saved = forward(*arrays)
        ctx.save_for_backward(*arrays, *saved)
        ctx.backward_fn, ctx.n = backward, n
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, d_out: Any) -> tuple:
        tensors = ctx.saved_tensors
        arrays, saved = tensors[: ctx.n], tuple(tensors[ctx.n :])
        needs = tuple(ctx.needs_input_grad[3:])
        grads = ctx.backward_fn(arrays, saved, d_out, needs)
        grads = tuple(g if need else None for g, need in zip(grads, needs, strict=True))
        return (None, None, None, *grads)
