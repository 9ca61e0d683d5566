"""PyTorch's fused CPU flash attention as kernels that give the log-sum-exp, and its
fused backward pass: the blocks and runs of attnkit's executor under autograd.

``aten._scaled_dot_product_flash_attention_for_cpu`` gives a block's output and lse; its
``_backward`` gives dq, dk, dv from them without storing the scores. Masks go in as
additive (0 / -inf). A row with no allowed key gets lse -inf (the kernel says 0). Each
function takes tensors and plain arguments and returns None where it does not apply
(leading dims that differ, 16-bit inputs).
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = ["block_backward", "block_lse", "run_backward", "run_lse"]

_FORWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


def _applies(q: Any, k: Any, v: Any) -> bool:
    same = q.shape[:-2] == k.shape[:-2] == v.shape[:-2]
    return same and q.dtype in (torch.float32, torch.float64) and q.device.type == "cpu"


def _additive(mask: Any, dtype: Any) -> Any:
    """A bool mask (True = may attend) as 0 / -inf in ``dtype``; an additive one cast."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        return torch.zeros((), dtype=dtype).masked_fill(~mask, -math.inf).expand(mask.shape)
    return mask if mask.dtype == dtype else mask.to(dtype)


def _as_4d(*xs: Any) -> tuple[tuple[int, ...], list[Any]]:
    """(leading dims, tensors as (N, 1, rows, X), each row contiguous): the kernel takes
    4-D operands, and gives wrong numbers where the last axis has a stride other than 1
    (a transposed view; pytorch#187506's kind)."""
    lead = tuple(xs[0].shape[:-2])
    return lead, [_rows_contiguous(x).reshape(-1, 1, *x.shape[-2:]) for x in xs]


def _rows_contiguous(x: Any) -> Any:
    return x if x.stride(-1) == 1 else x.contiguous()


def _mask_4d(mask: Any, lead: tuple[int, ...]) -> Any:
    """The mask as the kernel broadcasts it: (Bq, Sk), or (N, 1, Bq, Sk) for one that
    differs over the leading dims ``lead`` (broadcast to them first)."""
    if mask is None or mask.dim() <= 2 or all(d == 1 for d in mask.shape[:-2]):
        return None if mask is None else mask.reshape(mask.shape[-2:])
    return mask.expand(*lead, *mask.shape[-2:]).reshape(-1, 1, *mask.shape[-2:])


def _fix_lse(lse: Any, mask: Any) -> Any:
    """-inf on rows the mask leaves no key (the kernel gives 0 there)."""
    if mask is None:
        return lse
    empty = ~torch.isfinite(mask).any(dim=-1)  # (..., Bq)
    return lse.masked_fill(empty.expand(lse.shape) if empty.dim() else empty, -math.inf)


def block_lse(q: Any, k: Any, v: Any, mask: Any, scale: float) -> tuple[Any, Any] | None:
    """(out (..., Bq, Ev), lse (..., Bq)) of one block: q (..., Bq, E), k (..., Sk, E),
    v (..., Sk, Ev), mask bool or additive broadcastable to (..., Bq, Sk), or None."""
    if not _applies(q, k, v) or v.shape[-1] != q.shape[-1]:
        return None
    lead, (q4, k4, v4) = _as_4d(q, k, v)
    try:
        mask4 = _mask_4d(_additive(mask, q.dtype), lead)
    except RuntimeError:  # a mask whose leading dims are not the blocks'
        return None
    out, lse = _FORWARD(q4, k4, v4, 0.0, False, attn_mask=mask4, scale=scale)
    lse = _fix_lse(lse, mask4)
    return out.reshape(*lead, *out.shape[-2:]), lse.reshape(*lead, lse.shape[-1])


def block_backward(
    d_out: Any, q: Any, k: Any, v: Any, out: Any, lse: Any, mask: Any, scale: float
) -> tuple[Any, Any, Any] | None:
    """(dq, dk, dv) of one block from its output and lse (as :func:`block_lse` gave
    them) and the output's cotangent ``d_out`` (..., Bq, Ev)."""
    if not _applies(q, k, v) or v.shape[-1] != q.shape[-1]:
        return None
    lead, (q4, k4, v4, o4, d4) = _as_4d(q, k, v, out, d_out)
    try:
        mask4 = _mask_4d(_additive(mask, q.dtype), lead)
    except RuntimeError:
        return None
    live = torch.isfinite(lse)
    lse4 = torch.where(live, lse, torch.zeros_like(lse)).reshape(-1, 1, lse.shape[-1])
    dq, dk, dv = _BACKWARD(d4, q4, k4, v4, o4, lse4, 0.0, False, attn_mask=mask4, scale=scale)
    return tuple(x.reshape(*lead, *x.shape[-2:]) for x in (dq, dk, dv))  # type: ignore[return-value]


def _unfolded(q: Any, k: Any, v: Any, rows: int) -> tuple[Any, Any, Any, int, int]:
    """A run's blocks as the kernel's batch: q (N, n, rows, E), k and v (N, n, width, X)
    as strided views (no copy), with n and width."""
    n = q.shape[-2] // rows
    width = k.shape[-2] - (n - 1) * rows
    q, k, v = (_rows_contiguous(x) for x in (q, k, v))
    qb = q.reshape(-1, n, rows, q.shape[-1])  # (N, n, rows, E)
    kb = k.reshape(-1, *k.shape[-2:]).unfold(-2, width, rows).transpose(-1, -2)
    vb = v.reshape(-1, *v.shape[-2:]).unfold(-2, width, rows).transpose(-1, -2)
    return qb, kb, vb, n, width


def run_lse(q: Any, k: Any, v: Any, mask: Any, scale: float, rows: int) -> tuple[Any, Any] | None:
    """(out (..., n*rows, Ev), lse (..., n*rows)) of every block of a run in one call: q
    (..., n*rows, E), k and v (..., (n-1)*rows + width, E|Ev), mask (rows, width) bool
    (the same for every block) or None; block i's rows attend keys [i*rows, i*rows +
    width)."""
    if not _applies(q, k, v) or v.shape[-1] != q.shape[-1]:
        return None
    if mask is not None and any(d != 1 for d in mask.shape[:-2]):
        return None
    mask = None if mask is None else _additive(mask.reshape(mask.shape[-2:]), q.dtype)
    lead = tuple(q.shape[:-2])
    qb, kb, vb, n, _ = _unfolded(q, k, v, rows)
    out, lse = _FORWARD(qb, kb, vb, 0.0, False, attn_mask=mask, scale=scale)
    lse = _fix_lse(lse, mask)
    return out.reshape(*lead, n * rows, out.shape[-1]), lse.reshape(*lead, n * rows)


def run_backward(
    d_out: Any, q: Any, k: Any, v: Any, out: Any, lse: Any, mask: Any, scale: float, rows: int
) -> tuple[Any, Any, Any] | None:
    """(dq (..., n*rows, E), dk, dv (..., keys, E|Ev)) of a run of n blocks from its
    output and lse, in one fused call: q (..., n*rows, E); k and v (..., (n + c - 1) *
    rows, E|Ev), block i reading keys [i*rows, (i + c)*rows), ``mask`` (rows, c*rows)
    bool (the same for every block: padded columns False). The blocks' keys are strided
    views; each block's key gradients are added into the key rows it read by c shifted
    sums (block i's chunk t goes to key chunk i + t), never a scatter."""
    if not _applies(q, k, v) or v.shape[-1] != q.shape[-1]:
        return None
    lead = tuple(q.shape[:-2])
    n = q.shape[-2] // rows
    c = k.shape[-2] // rows - n + 1
    width = c * rows
    mask = None if mask is None else _additive(mask.reshape(mask.shape[-2:]), q.dtype)
    q, k, v = (_rows_contiguous(x) for x in (q, k, v))
    qb = q.reshape(-1, n, rows, q.shape[-1])  # (N, n, rows, E)
    kb = k.reshape(-1, *k.shape[-2:]).unfold(-2, width, rows).transpose(-1, -2)
    vb = v.reshape(-1, *v.shape[-2:]).unfold(-2, width, rows).transpose(-1, -2)
    live = torch.isfinite(lse)
    lb = torch.where(live, lse, torch.zeros_like(lse)).reshape(qb.shape[:-1])
    dq, dkb, dvb = _BACKWARD(
        d_out.reshape(qb.shape), qb, kb, vb, out.reshape(qb.shape), lb, 0.0, False,
        attn_mask=mask, scale=scale,
    )  # fmt: skip

    def fold(x: Any) -> Any:  # (N, n, c*rows, X) -> (N, (n + c - 1)*rows, X)
        parts = x.reshape(x.shape[0], n, c, rows, x.shape[-1])
        tail = x.new_zeros((x.shape[0], c - 1, rows, x.shape[-1]))
        total = torch.cat([parts[:, :, 0], tail], dim=1)  # chunk 0, written once
        for t in range(1, c):
            total[:, t : t + n] += parts[:, :, t]
        return total.reshape(x.shape[0], (n + c - 1) * rows, x.shape[-1])

    return (
        dq.reshape(*lead, n * rows, dq.shape[-1]),
        fold(dkb).reshape(*lead, k.shape[-2], k.shape[-1]),
        fold(dvb).reshape(*lead, v.shape[-2], v.shape[-1]),
    )
