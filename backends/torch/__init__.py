"""The PyTorch backend: dropout draws from a ``torch.Generator`` on the inputs' device;
``F.scaled_dot_product_attention`` as the whole-call, block and run kernels
(:mod:`.kernels`); ``torch.utils.checkpoint`` recomputes blocks in the backward pass;
``CausalBias`` objects are accepted as masks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from attnkit.errors import ArgumentTypeError, DeviceMismatchError
from attnkit.shapes import type_name

from .. import Backend, Kernels

__all__ = ["BACKEND", "TorchBackend"]


class TorchBackend(Backend):
    NAME = "torch"
    MODULE = "torch"
    NAMESPACE = "array_api_compat.torch"
    install_hint = 'pip install "attnkit[torch]"  (or: pip install torch==2.13.0)'

    @property
    def kernels(self) -> Kernels:  # type: ignore[override]
        """SDPA's kernels, imported on first use (importing them imports torch). Cached
        in the instance without a lock (functools.cached_property takes an RLock on
        Python 3.11, which torch.compile cannot trace)."""
        found = self.__dict__.get("_kernels")
        if found is None:
            from .kernels import KERNELS

            found = self.__dict__["_kernels"] = KERNELS
        return found

    @kernels.setter
    def kernels(self, value: Kernels) -> None:  # tests swap in kernels that decline
        self.__dict__["_kernels"] = value

    def from_numpy(self, a: Any, dtype: str, device: Any = None) -> Any:
        import numpy as np
        import torch

        out = torch.from_numpy(np.array(a, dtype="float64")).to(getattr(torch, dtype))
        return out if device is None else out.to(device)

    def to_numpy(self, x: Any) -> Any:
        import torch

        x = x.detach().cpu()
        if x.dtype in (torch.bfloat16, torch.float16):
            x = x.to(torch.float32)
        return x.numpy()

    def synchronize(self, x: Any) -> None:
        import torch

        if isinstance(x, torch.Tensor) and x.is_cuda:
            torch.cuda.synchronize(x.device)

    def concrete_float(self, x: Any) -> float:
        """``float`` of a 0-d tensor, detached first (no warning when it requires grad);
        TypeError under ``torch.compile``, where no value is concrete (as under jax.jit)."""
        import torch

        if torch.compiler.is_compiling():
            raise TypeError("no concrete values while torch.compile traces")
        return float(x.detach())

    def check_rng(self, rng: Any, like: Any = None) -> None:
        import torch

        if not isinstance(rng, torch.Generator):
            raise ArgumentTypeError(
                f"rng must be a torch.Generator for PyTorch tensors, got {type_name(rng)}; "
                "create one with torch.Generator(device=query.device).manual_seed(seed)."
            )
        if like is not None and rng.device.type != like.device.type:
            raise DeviceMismatchError(
                f"rng is a torch.Generator on {rng.device} but the inputs are on "
                f"{like.device}; create it with "
                f"torch.Generator(device={str(like.device)!r}).manual_seed(seed)."
            )

    def make_rng(self, seed: int) -> Any:
        import torch

        return torch.Generator().manual_seed(seed)

    def dropout_keep(
        self, rng: Any, shape: tuple[int, ...], keep_prob: float, *, like: Any, stream: int
    ) -> Any:
        import torch

        draws = torch.rand(shape, generator=rng, device=like.device, dtype=torch.float32)
        return draws < keep_prob

    def normal(self, rng: Any, shape: tuple[int, ...], *, dtype: Any, device: Any = None) -> Any:
        """Standard normal draws of ``shape`` on ``device`` (default: the generator's)."""
        import torch

        device = rng.device if device is None else device
        return torch.randn(shape, generator=rng, dtype=dtype, device=device)

    def uniform(
        self,
        rng: Any,
        shape: tuple[int, ...],
        low: float,
        high: float,
        *,
        dtype: Any,
        device: Any = None,
    ) -> Any:
        """Uniform draws on ``[low, high)`` of ``shape`` on ``device`` (default: the
        generator's)."""
        import torch

        device = rng.device if device is None else device
        out = torch.empty(shape, dtype=dtype, device=device)
        return out.uniform_(low, high, generator=rng)

    def split_rng(self, rng: Any, n: int) -> list[Any]:
        """``n`` generators on ``rng``'s device, seeded from draws of ``rng``."""
        import torch

        seeds = torch.randint(0, 2**62, (n,), generator=rng, device=rng.device).tolist()
        return [torch.Generator(device=rng.device).manual_seed(int(s)) for s in seeds]

    def recompute_block(self, fn: Callable[[], Any], *inputs: Any) -> Any:
        """``fn()`` under ``torch.utils.checkpoint`` when autograd records it (an input
        needs gradients): the block's scores are recomputed in the backward pass."""
        import torch

        if torch.is_grad_enabled() and any(getattr(x, "requires_grad", False) for x in inputs):
            from torch.utils.checkpoint import checkpoint

            return checkpoint(fn, use_reentrant=False)
        return fn()

    def custom_vjp(
        self,
        forward: Callable[..., Any],
        backward: Callable[..., Any],
        *arrays: Any,
        random: bool = False,
    ) -> Any:
        """``forward`` and ``backward`` as one ``torch.autograd.Function`` when autograd
        records the call (an input requires grad, grad mode on), outside
        ``torch.compile`` and torch.func's transforms; else None."""
        import torch

        from .autograd import records_gradients, vjp_function

        if torch.compiler.is_compiling() or not records_gradients(*arrays):
            return None
        return vjp_function(forward, backward, *arrays)

    def replay_rng(self, rng: Any) -> Any:
        """A new ``torch.Generator`` on ``rng``'s device in ``rng``'s current state."""
        import torch

        copy = torch.Generator(device=rng.device)
        copy.set_state(rng.get_state())
        return copy

    def elementwise_grad(self, fn: Callable[[Any], Any], x: Any) -> Any:
        """d fn(x) / dx for an elementwise ``fn``: one vector-Jacobian product with ones."""
        import torch

        with torch.enable_grad():
            leaf = x.detach().requires_grad_(True)
            out = fn(leaf)
            (grad,) = torch.autograd.grad(out, leaf, torch.ones_like(out), allow_unused=True)
        return torch.zeros_like(x) if grad is None else grad

    def traced_call(self, query: Any, key: Any, value: Any, options: Any) -> Any:
        """While ``torch.compile`` traces, the call as one ``attnkit::attention`` operator
        (:mod:`.compiled`), or None where it is traced as it is."""
        from .compiled import traced_call

        return traced_call(query, key, value, options)

    def foreign_mask(self, obj: Any) -> Any:
        """PyTorch's ``torch.nn.attention.bias.CausalBias`` (``causal_upper_left``,
        ``causal_lower_right``) as ``(attnkit.masks.causal(alignment), (L, S))``; None
        for any other object."""
        try:
            from torch.nn.attention.bias import CausalBias, CausalVariant
        except ImportError:  # torch < 2.3
            return None
        if not isinstance(obj, CausalBias):
            return None
        from attnkit import masks

        lower_right = obj.variant == CausalVariant.LOWER_RIGHT
        causal = masks.causal("bottom_right" if lower_right else "top_left")
        return causal, (obj.seq_len_q, obj.seq_len_kv)


BACKEND = TorchBackend()
