"""The backend's fused backward kernels inside the row blocks' backward pass.

Where the backend offers one (``Kernels.block_backward``, ``run_backward``: PyTorch's CPU
flash attention), a block's gradients, or a window's run's, come from one kernel call
given the rows' output and lse. Taken for whole rows, without an additive mask, dropout
or score_mod, on operands checked finite.
"""

from __future__ import annotations

from typing import Any

from array_api_compat import device

from ..masks import Tile
from ..problem import Problem
from .accumulate import sum_to_shape
from .operands import Prepared
from .tiles import block_plan, kernel_mask, select_rows
from .translated_runs import Run, find_run

__all__ = [
    "FUSED_ROWS",
    "RUN_BACKWARD_ROWS",
    "backward_run",
    "block_grads",
    "fused_kernels",
    "run_grads",
]

#: Query rows per block where the backend's fused backward takes the blocks: each call
#: has a fixed cost (it zeroes buffers the size of its keys), and the backward needs only
#: the rows' out and lse, so its blocks need not be the forward's.
FUSED_ROWS = 512


def fused_kernels(
    p: Problem, ops: Prepared, kernels: Any, whole_rows: bool, mask_shape: Any
) -> Any:
    """The kernels whose fused backward applies to this call, or None."""
    if kernels is None or not (whole_rows and ops.finite) or mask_shape is not None:
        return None
    if ops.additive is not None or p.dropout_p > 0 or p.score_mod is not None:
        return None  # a huge additive floor: the kernel reads lse as it stands
    return kernels


#: Query rows per block of a window's run in the fused backward: each block reads
#: c = ceil((rows + reach) / rows) chunks of ``rows`` keys, whose gradients are c shifted
#: sums (smaller blocks read fewer keys beyond their window, larger ones sum fewer chunks).
RUN_BACKWARD_ROWS = 128


def backward_run(p: Problem, ops: Prepared, kernels: Any) -> Run | None:
    """A window's interior as one run of blocks of :data:`RUN_BACKWARD_ROWS` for the
    fused backward, or None (no run kernel, a mask, a structure that is no window)."""
    if kernels.run_backward is None or ops.allowed_mask is not None:
        return None
    return find_run(p, RUN_BACKWARD_ROWS)


def run_grads(
    p: Problem, ops: Prepared, kernels: Any, run: Run, out: Any, lse: Any, d_out: Any
) -> tuple[Any, Any, Any]:
    """(dq (..., run rows, E), dk, dv (..., run keys, E|Ev)) of ``run`` from the fused
    run backward: each block's keys widened to c whole chunks of its rows (keys past S
    padded, columns past the window masked), its gradients summed to the operands'
    heads."""
    xp, r = p.xp, run.rows
    c = -(-run.width // r)
    span = (run.blocks + c - 1) * r  # the keys the blocks' widened windows reach
    k, v = (x[..., run.k_lo : min(p.S, run.k_lo + span), :] for x in (ops.key, ops.value))
    if k.shape[-2] < span:  # past S: zero keys, masked below
        k, v = (_pad_rows(xp, x, span) for x in (k, v))
    g = p.geometry
    t = Tile(xp, p.device, g, run.q_lo, run.q_lo + r, [(run.k_lo, run.k_lo + c * r)])
    allowed = p.structure.tile(t)  # (rows, c*rows): the same for every block
    inside = t.k_index < p.S
    allowed = inside if allowed is None else allowed & inside
    rows = slice(run.q_lo, run.q_hi)
    grads = kernels.run_backward(
        d_out[..., rows, :], ops.query[..., rows, :], k, v, out[..., rows, :], lse[..., rows],
        allowed, p.scale, r,
    )  # fmt: skip
    if grads is None:
        raise RuntimeError("the fused run backward declined a run it was offered")
    dq, dk, dv = grads
    keys = run.k_hi - run.k_lo
    q_shape, k_shape, v_shape = tuple(ops.query.shape), tuple(ops.key.shape), tuple(ops.value.shape)
    return (
        sum_to_shape(xp, dq, (*q_shape[:-2], dq.shape[-2], q_shape[-1])),
        sum_to_shape(xp, dk[..., :keys, :], (*k_shape[:-2], keys, k_shape[-1])),
        sum_to_shape(xp, dv[..., :keys, :], (*v_shape[:-2], keys, v_shape[-1])),
    )


def _pad_rows(xp: Any, x: Any, n: int) -> Any:
    zeros = xp.zeros((*x.shape[:-2], n - x.shape[-2], x.shape[-1]), dtype=x.dtype,
                     device=device(x))  # fmt: skip
    return xp.concat([x, zeros], axis=-2)


def block_grads(
    p: Problem, ops: Prepared, kernels: Any, t: Any, q_lo: int, q_hi: int, out: Any, lse: Any,
    d_out: Any, live: Any,
) -> tuple[Any, Any, Any, Any] | None:  # fmt: skip
    """One block's (dq, dk, dv, None) from the kernel's fused backward, or None where it
    declines."""
    xp = p.xp
    _, allowed = block_plan(p, ops, q_lo, q_hi, live)
    mask = kernel_mask(p, ops, t, allowed, kernels.block_wants_additive)
    q = ops.query[..., q_lo:q_hi, :]
    k = select_rows(xp, ops.key, t.ranges)
    v = select_rows(xp, ops.value, t.ranges)
    rows = slice(q_lo, q_hi)
    grads = kernels.block_backward(
        d_out[..., rows, :], q, k, v, out[..., rows, :], lse[..., rows], mask, p.scale
    )
    return None if grads is None else (*grads, None)
