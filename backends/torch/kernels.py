"""PyTorch's fused ``F.scaled_dot_product_attention`` as attnkit's kernels (``impl="auto"``).

The whole-call kernel takes only calls whose semantics SDPA shares exactly: no dropout
(SDPA draws from the global generator), weights or lse; no window or structured mask;
causal only with the diagonal at position 0; no zero-length axis. SDPA adds -inf to a
masked score rather than replacing it, so with a mask the output (under autograd, the
inputs) is checked finite and the generic path takes the call otherwise. Each kernel
returns None where it does not apply.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .. import Kernels
from . import flash
from .autograd import records_gradients as _records_gradients

__all__ = [
    "KERNELS",
    "RUN_ROWS",
    "attention",
    "attention_declines",
    "attention_plan",
    "block_attention",
    "block_run",
]


def attention_declines(
    query: Any, key: Any, value: Any, *, mask: Any, causal: bool, scale: float, gqa: bool
) -> str | None:
    """Why :func:`attention` declines this call without computing anything, or None."""
    low = query.dtype in (torch.float16, torch.bfloat16)
    if low and mask is not None and mask.dtype not in (torch.bool, query.dtype):
        return f"SDPA would round the {mask.dtype} additive mask to {query.dtype} (-1e30 -> -inf)"
    if low and query.device.type == "cpu" and _records_gradients(query, key, value):
        # 2-4x less accurate than float32 accumulation (GQA dK/dV, float-mask dK at L = 512)
        return "the CPU kernel's 16-bit gradients are less accurate than float32 accumulation"
    batch = -3 if gqa else -2  # with GQA the head axes differ by design
    if key.shape[:-2] != value.shape[:-2] or query.shape[:batch] != key.shape[:batch]:
        return "SDPA does not broadcast leading dims"
    return None


def attention(
    query: Any,
    key: Any,
    value: Any,
    *,
    mask: Any,
    causal: bool,
    scale: float,
    gqa: bool,
) -> Any:
    """SDPA on the whole call: out (..., Hq, L, Ev), or None (see the module docstring).

    Under ``torch.compile`` no value is concrete, so a masked call declines (its NaN
    check needs values): such calls reach this kernel in eager code only, inside the
    ``attnkit::attention`` operator (:mod:`.compiled`)."""
    if attention_declines(query, key, value, mask=mask, causal=causal, scale=scale, gqa=gqa):
        return None
    masked = causal or mask is not None
    if masked and torch.compiler.is_compiling():
        return None  # no finiteness check inside a graph: the executor's guarded path
    grad = _records_gradients(query, key, value)
    if masked and grad and not _finite(query, key, value):
        return None  # a NaN or inf in a masked pair would leak into the gradients
    out = _sdpa(query, key, value, mask, causal, scale, gqa)
    if masked and not grad and not _finite(out):
        return None  # SDPA adds -inf to a masked NaN: the generic path replaces it
    return out


def _sdpa(
    query: Any, key: Any, value: Any, mask: Any, causal: bool, scale: float, gqa: bool
) -> Any:
    """SDPA on the whole call, a float mask in the inputs' dtype first."""
    if mask is not None and mask.dtype != torch.bool and mask.dtype != query.dtype:
        mask = mask.to(query.dtype)
    return F.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, is_causal=causal, scale=scale, enable_gqa=gqa
    )


def _finite(*xs: Any) -> bool:
    """Whether every element of ``xs`` is finite: one sum per tensor (a NaN or inf makes
    it non-finite; an overflowing finite sum reads as not finite, which only costs the
    generic path). SDPA lets a NaN or inf at a masked position through (it adds -inf
    to the score, and 0 * NaN in the value product), and every such leak shows as a
    non-finite output: checking the output (L x Ev) is cheaper than the inputs."""
    try:
        return all(bool(torch.isfinite(x.detach().sum())) for x in xs)
    except RuntimeError:  # no concrete value (torch.func.vmap): take the guarded path
        return False


def attention_plan(
    query: Any, key: Any, value: Any, *, causal: bool, scale: float, gqa: bool
) -> Any:
    """For a call without mask that :func:`attention` takes: SDPA with this call's
    arguments bound, a function of (query, key, value) for later calls of the same
    signature, returning None where a call must take the generic path (16-bit inputs
    under autograd on the CPU; a causal call whose output is not finite); or None."""
    if attention_declines(query, key, value, mask=None, causal=causal, scale=scale, gqa=gqa):
        return None
    if query.dtype in (torch.float16, torch.bfloat16) and query.device.type == "cpu":

        def low_plan(query: Any, key: Any, value: Any) -> Any:
            if _records_gradients(query, key, value):
                return None  # 16-bit gradients: see attention_declines
            out = F.scaled_dot_product_attention(
                query, key, value, is_causal=causal, scale=scale, enable_gqa=gqa
            )
            return out if not causal or _finite(out) else None

        return low_plan
    if not causal:

        def plan(query: Any, key: Any, value: Any) -> Any:  # F's attribute looked up per call
            return F.scaled_dot_product_attention(query, key, value, scale=scale, enable_gqa=gqa)

        return plan

    def causal_plan(query: Any, key: Any, value: Any) -> Any:
        if _records_gradients(query, key, value):
            if not _finite(query, key, value):
                return None
            return F.scaled_dot_product_attention(
                query, key, value, is_causal=True, scale=scale, enable_gqa=gqa
            )
        out = F.scaled_dot_product_attention(
            query, key, value, is_causal=True, scale=scale, enable_gqa=gqa
        )
        return out if _finite(out) else None

    return causal_plan


def block_attention(
    q: Any, k: Any, v: Any, mask: Any, scale: float, shift_free: bool = False
) -> Any:
    """SDPA on one block: q (..., Bq, E), k (..., Sk, E), v (..., Sk, Ev), mask bool (True
    = may attend), additive float or None (the executor passes the additive form, made
    once per tile: ``block_wants_additive``). None where leading dims differ (SDPA's
    fast kernels do not broadcast them). ``shift_free`` is not read: SDPA stabilizes the
    softmax itself.
    """
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-2] != v.shape[:-2]:
        return None
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


#: Under autograd, the backward pass of a run goes in pieces of at most this many elements
#: of unfolded keys (N x blocks x width x E): SDPA's backward returns the gradient of its
#: key and value operands in that unfolded shape, (rows + window) / rows times the size
#: of the keys (9 times at 32 rows and a window of 256); pieces bound it to 64 MiB.
GRAD_PIECE_ELEMENTS = 2**24


def block_run(q: Any, k: Any, v: Any, mask: Any, scale: float, rows: int) -> Any:
    """Every block of a run (:mod:`attnkit.blocked.translated_runs`) in one SDPA call, or
    None where SDPA does not apply (leading dims differ, or a mask that varies over them).

    q (..., n*rows, E); k (..., (n-1)*rows + width, E), v likewise with Ev; block i's
    queries q[..., i*rows:(i+1)*rows, :] attend keys k[..., i*rows:i*rows + width, :]
    under ``mask`` (rows, width) (bool, True = may attend; or None). The blocks' keys are
    a strided view (``unfold``: no copy)::

        qb = q  as (N, n, rows, E)     kb = unfold(k) as (N, n, width, E)
        out = SDPA(qb, kb, vb, mask)   -> (N, n, rows, Ev) -> (..., n*rows, Ev)

    When autograd records the call, the forward pass is the same single call and the
    backward pass (:class:`_RunFunction`) recomputes the blocks in pieces of at most
    GRAD_PIECE_ELEMENTS unfolded keys, adding each piece's gradients into q, k and v's.
    """
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-2] != v.shape[:-2]:
        return None
    if mask is not None:
        if any(d != 1 for d in mask.shape[:-2]):
            return None  # a tile that differs across heads or batch
        mask = mask.reshape(mask.shape[-2:])  # (rows, width)
    if _records_gradients(q, k, v):
        return _RunFunction.apply(q, k, v, mask, scale, rows)
    return _run_blocks(q, k, v, mask, scale, rows)


class _RunFunction(torch.autograd.Function):
    """A run whose backward pass recomputes it in pieces (see block_run): the gradient
    memory is one piece's unfolded keys, and each piece adds into one gradient buffer per
    operand (autograd through slices of k would allocate a zero tensor of k's full size
    for every piece, which grows with L squared)."""

    @staticmethod
    def forward(q: Any, k: Any, v: Any, mask: Any, scale: float, rows: int) -> Any:
        return _run_blocks(q, k, v, mask, scale, rows)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        q, k, v, mask, scale, rows = inputs
        ctx.save_for_backward(q, k, v)
        ctx.mask, ctx.scale, ctx.rows = mask, scale, rows

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_out: Any) -> tuple:
        q, k, v = ctx.saved_tensors
        rows, needs = ctx.rows, ctx.needs_input_grad[:3]
        n = q.shape[-2] // rows
        width = k.shape[-2] - (n - 1) * rows
        per_block = q.numel() // max(q.shape[-2], 1) * width  # N x width x E per block
        piece = max(1, GRAD_PIECE_ELEMENTS // max(per_block, 1))
        dq = torch.empty_like(q) if needs[0] else None
        dk = torch.zeros_like(k) if needs[1] else None
        dv = torch.zeros_like(v) if needs[2] else None
        for b in range(0, n, piece):
            m = min(piece, n - b)
            q_rows = slice(b * rows, (b + m) * rows)  # the piece's query rows
            k_rows = slice(b * rows, (b + m - 1) * rows + width)  # the keys they read
            parts = [
                x[..., r, :].detach().requires_grad_(need)
                for x, r, need in (
                    (q, q_rows, needs[0]),
                    (k, k_rows, needs[1]),
                    (v, k_rows, needs[2]),
                )
            ]
            with torch.enable_grad():
                out = _run_blocks(*parts, ctx.mask, ctx.scale, rows)  # (..., m*rows, Ev)
                wanted = [x for x in parts if x.requires_grad]
                grads = iter(torch.autograd.grad(out, wanted, grad_out[..., q_rows, :]))
            if needs[0]:
                dq[..., q_rows, :] = next(grads)
            if needs[1]:
                dk[..., k_rows, :] += next(grads)
            if needs[2]:
                dv[..., k_rows, :] += next(grads)
        return dq, dk, dv, None, None, None


def _run_blocks(q: Any, k: Any, v: Any, mask: Any, scale: float, rows: int) -> Any:
    """One SDPA call over the n = q.shape[-2] / rows blocks of a run (see block_run).

    SDPA's CPU kernel takes 4-D operands, so the leading dims are merged into one, as a
    view only: where they cannot be (the heads of a (B, L, H, E) projection transposed to
    (B, H, L, E)), the first leading dim is looped over instead, never copying the
    unfolded keys (width / rows times the keys' size).
    """
    lead = q.shape[:-2]
    if not lead:  # (L, E): one batch of one head
        return _run_blocks(q[None], k[None], v[None], mask, scale, rows)[0]
    if len(lead) > 1:
        try:
            merged = [x.view(-1, *x.shape[-2:]) for x in (q, k, v)]  # (N, *, *)
        except RuntimeError:  # not expressible as a view: one call per leading index
            outs = [_run_blocks(q[i], k[i], v[i], mask, scale, rows) for i in range(lead[0])]
            return torch.stack(outs)  # (..., n*rows, Ev)
        return _run_blocks(*merged, mask, scale, rows).reshape(*lead, -1, v.shape[-1])
    n = q.shape[-2] // rows
    width = k.shape[-2] - (n - 1) * rows
    qb = q.unflatten(-2, (n, rows))  # (N, n, rows, E)
    kb = k.unfold(-2, width, rows).transpose(-1, -2)  # (N, n, width, E), a view
    vb = v.unfold(-2, width, rows).transpose(-1, -2)  # (N, n, width, Ev), a view
    out = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask, scale=scale)
    return out.flatten(-3, -2)  # (N, n*rows, Ev)


#: Query rows per block of a run: SDPA's CPU kernel attends 32 query rows per task below
#: 192 rows (its q split), and blocks of 32 read at most 31 keys beyond each row's window.
#: Measured at L = 8192, 8 heads, head size 64: window 256, blocks of 16, 32, 64, 128 took
#: 31, 30, 34, 36 ms; window 64: 15, 13, 18, 28 ms.
RUN_ROWS = 32


def _supported() -> bool:
    """torch >= 2.5: older releases give NaN on fully masked rows and lack enable_gqa."""
    version = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    return version >= (2, 5)


#: The kernels the PyTorch backend offers (none on torch < 2.5). The block kernel adds
#: -inf to masked scores: the executor gives it only inputs checked finite.
KERNELS = (
    Kernels(
        attention=attention,
        attention_declines=attention_declines,
        attention_plan=attention_plan,
        block=block_attention,
        run=block_run,
        run_rows=RUN_ROWS,
        block_wants_additive=True,  # SDPA turns a bool mask into an additive one per call
        block_lse=flash.block_lse,  # the fused CPU flash kernel: with lse, and its backward
        run_lse=flash.run_lse,
        block_backward=flash.block_backward,
        run_backward=flash.run_backward,
    )
    if _supported()
    else Kernels()
)
