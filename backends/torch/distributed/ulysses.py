"""Ulysses sequence parallelism over torch.distributed: two differentiable all-to-alls
around the unchanged core::

    (..., H, N/P, E) --all_to_all--> (..., H/P, N, E) --core--> (..., H/P, N, Ev)
                     --all_to_all--> (..., H, N/P, Ev)

The all-to-alls are ``all_to_all_single_autograd``, so autograd runs their transposes.
Heads must divide by P (checked before any work; otherwise use ring attention).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed._functional_collectives as fc

import attnkit as ak

from .checks import Call

__all__ = ["ulysses_function"]


def _seq_to_heads(x: Any, call: Call) -> Any:
    """(..., H, n, E) -> (..., H/P, P*n, E): all heads of n local positions to H/P heads
    of every rank's positions (rank order along the sequence)."""
    P = call.world
    *lead, H, n, E = x.shape
    y = x.reshape(*lead, P, H // P, n, E)  # (..., P, H/P, n, E): dim -4 = destination
    y = y.movedim(-4, 0).contiguous()  # (P, ..., H/P, n, E)
    y = fc.all_to_all_single_autograd(y, None, None, call.group)  # dim 0 = source rank
    y = fc.wait_tensor(y)
    y = y.movedim(0, -3)  # (..., H/P, P, n, E)
    return y.reshape(*lead, H // P, P * n, E)  # (..., H/P, N, E)


def _heads_to_seq(x: Any, call: Call) -> Any:
    """(..., h, P*n, E) -> (..., P*h, n, E): the inverse of :func:`_seq_to_heads`."""
    P = call.world
    *lead, h, N, E = x.shape
    y = x.reshape(*lead, h, P, N // P, E)  # (..., h, P, n, E): dim -3 = destination
    y = y.movedim(-3, 0).contiguous()  # (P, ..., h, n, E)
    y = fc.all_to_all_single_autograd(y, None, None, call.group)  # dim 0 = source head group
    y = fc.wait_tensor(y)
    y = y.movedim(0, -4)  # (..., P, h, n, E)
    return y.reshape(*lead, P * h, N // P, E)  # (..., H, n, E)


def _zigzag_order(P: int, inverse: bool) -> list[int]:
    """Chunk order of the gathered zigzag sequence (rank r's chunks r, 2P-1-r in turn):
    ``order[c]`` is the gathered chunk that holds natural chunk c; inverse maps back."""
    gathered = [c for r in range(P) for c in (r, 2 * P - 1 - r)]
    if inverse:
        return gathered  # natural chunk gathered[g] goes to gathered position g
    return [gathered.index(c) for c in range(2 * P)]


def _reorder(x: Any, P: int, inverse: bool) -> Any:
    """(..., h, N, E) with its 2P chunks permuted between zigzag and natural order."""
    *lead, h, N, E = x.shape
    order = torch.tensor(_zigzag_order(P, inverse), device=x.device)
    y = x.reshape(*lead, h, 2 * P, N // (2 * P), E)  # (..., h, 2P, c, E)
    y = y.index_select(-3, order)  # (..., h, 2P, c, E) in the new chunk order
    return y.reshape(*lead, h, N, E)  # (..., h, N, E)


def ulysses_function(call: Call, layout: str, q: Any, k: Any, v: Any) -> Any:
    """The local output shard (..., Hq, N/P, Ev) of Ulysses attention, differentiable."""
    kw = call.kwargs
    qh, kh, vh = (_seq_to_heads(x, call) for x in (q, k, v))  # (..., H/P, N, E)
    if layout == "zigzag":  # the core needs natural position order along the sequence
        qh, kh, vh = (_reorder(x, call.world, inverse=False) for x in (qh, kh, vh))
    out = ak.scaled_dot_product_attention(qh, kh, vh, **kw)  # (..., Hq/P, L, Ev)
    if layout == "zigzag":
        out = _reorder(out, call.world, inverse=True)
    return _heads_to_seq(out, call)  # (..., Hq, L/P, Ev)
