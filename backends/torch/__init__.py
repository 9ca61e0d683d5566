"""PyTorch adapter: dropout draws from a ``torch.Generator`` on the inputs' device."""

from __future__ import annotations

from typing import Any

from attnkit.errors import ArgumentTypeError
from attnkit.shapes import type_name as _kind

__all__ = [
    "NAME",
    "RUN_ROWS",
    "available",
    "block_attention",
    "check_rng",
    "concrete_float",
    "dropout_keep",
    "foreign_mask",
    "from_numpy",
    "fused_attention",
    "fused_plan",
    "install_hint",
    "make_rng",
    "namespace",
    "normal",
    "recompute_block",
    "split_rng",
    "synchronize",
    "to_numpy",
    "uniform",
]

NAME = "torch"
install_hint = 'pip install "attnkit[torch]"  (or: pip install torch==2.13.0)'


def available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def check_rng(rng: Any, like: Any = None) -> None:
    """Raise unless ``rng`` is a generator this backend can draw from for ``like``."""
    import torch

    if not isinstance(rng, torch.Generator):
        raise ArgumentTypeError(
            f"rng must be a torch.Generator for PyTorch tensors, got {_kind(rng)}; "
            "create one with torch.Generator(device=query.device).manual_seed(seed)."
        )
    if like is not None and rng.device.type != like.device.type:
        from attnkit.errors import DeviceMismatchError

        raise DeviceMismatchError(
            f"rng is a torch.Generator on {rng.device} but the inputs are on {like.device}; "
            f"create it with torch.Generator(device={str(like.device)!r}).manual_seed(seed)."
        )


def dropout_keep(rng: Any, shape: tuple[int, ...], keep_prob: float, *, like: Any, stream: int):
    import torch

    return torch.rand(shape, generator=rng, device=like.device, dtype=torch.float32) < keep_prob


def from_numpy(a: Any, dtype: str) -> Any:
    import numpy as np
    import torch

    return torch.from_numpy(np.array(a, dtype="float64")).to(getattr(torch, dtype))


def to_numpy(x: Any) -> Any:
    import torch

    x = x.detach().cpu()
    if x.dtype in (torch.bfloat16, torch.float16):
        x = x.to(torch.float32)
    return x.numpy()


def make_rng(seed: int) -> Any:
    import torch

    return torch.Generator().manual_seed(seed)


def synchronize(x: Any) -> None:
    import torch

    if isinstance(x, torch.Tensor) and x.is_cuda:
        torch.cuda.synchronize(x.device)


def fused_attention(problem: Any) -> Any:
    """``F.scaled_dot_product_attention`` where it equals attnkit exactly, else None."""
    fused = _fused()
    return fused.fused_attention(problem) if fused.supported() else None


def fused_plan(problem: Any) -> Any:
    """SDPA with the call's arguments bound, for later calls of the same signature, or
    None (``fused.fused_plan``)."""
    fused = _fused()
    return fused.fused_plan(problem) if fused.supported() else None


_FUSED: list[Any] = []


def _fused() -> Any:
    """The ``fused`` module, imported on first use (it imports torch): once per process,
    since a decoding step must not pay for an import statement."""
    if not _FUSED:
        from . import fused

        _FUSED.append(fused)
    return _FUSED[0]


def concrete_float(x: Any) -> float:
    """``float`` of a 0-d tensor, detached first (no warning when it requires grad)."""
    return float(x.detach())


def block_attention(
    q: Any, k: Any, v: Any, mask: Any, scale: float, shift_free: bool = False
) -> Any:
    """One block of attnkit's generic executor through ``F.scaled_dot_product_attention``
    (mask bool, additive or None), or None where SDPA does not apply. ``shift_free`` is
    not used: SDPA stabilizes the softmax itself."""
    fused = _fused()
    return fused.block_attention(q, k, v, mask, scale) if fused.supported() else None


def _block_run(q: Any, k: Any, v: Any, mask: Any, scale: float, rows: int) -> Any:
    """All blocks of a run of translated blocks in one SDPA call (``fused.block_run``)."""
    fused = _fused()
    return fused.block_run(q, k, v, mask, scale, rows) if fused.supported() else None


#: Query rows per block of a run: SDPA's CPU kernel attends 32 query rows per task below
#: 192 rows (its q split), and blocks of 32 read at most 31 keys beyond each row's window.
#: Measured at L = 8192, 8 heads, head size 64: window 256, blocks of 16, 32, 64, 128 took
#: 31, 30, 34, 36 ms; window 64: 15, 13, 18, 28 ms.
RUN_ROWS = 32

block_attention.run = _block_run  # type: ignore[attr-defined]
block_attention.run_rows = RUN_ROWS  # type: ignore[attr-defined]


def normal(rng: Any, shape: tuple[int, ...], *, dtype: Any, device: Any = None) -> Any:
    """Standard normal draws of ``shape`` on ``device`` (default: the generator's)."""
    import torch

    device = rng.device if device is None else device
    return torch.randn(shape, generator=rng, dtype=dtype, device=device)


def uniform(
    rng: Any, shape: tuple[int, ...], low: float, high: float, *, dtype: Any, device: Any = None
) -> Any:
    """Uniform draws on ``[low, high)`` of ``shape`` on ``device`` (default: the generator's)."""
    import torch

    device = rng.device if device is None else device
    out = torch.empty(shape, dtype=dtype, device=device)
    return out.uniform_(low, high, generator=rng)


def split_rng(rng: Any, n: int) -> list[Any]:
    """``n`` generators on ``rng``'s device, seeded from draws of ``rng``."""
    import torch

    seeds = torch.randint(0, 2**62, (n,), generator=rng, device=rng.device).tolist()
    return [torch.Generator(device=rng.device).manual_seed(int(s)) for s in seeds]


def namespace() -> Any:
    """The array-API namespace of this backend (``array_api_compat.torch``)."""
    import array_api_compat.torch as xp

    return xp


def recompute_block(fn: Any, *inputs: Any) -> Any:
    """``fn()`` under ``torch.utils.checkpoint`` when autograd records it (an input needs
    gradients): the block's scores are recomputed in the backward pass, not stored."""
    import torch

    if torch.is_grad_enabled() and any(getattr(x, "requires_grad", False) for x in inputs):
        from torch.utils.checkpoint import checkpoint

        return checkpoint(fn, use_reentrant=False)
    return fn()


def foreign_mask(obj: Any) -> Any:
    """PyTorch's ``torch.nn.attention.bias.CausalBias`` (``causal_upper_left``,
    ``causal_lower_right``) as ``(attnkit.masks.causal(alignment), (L, S))``; None for
    any other object."""
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
