"""Attention over torch.distributed processes: ring and Ulysses sequence parallelism, and
batch/head parallelism through DTensor.

Each process passes its local shard (the sequence on axis -2; the same shape and
arguments on every process of ``group``, checked before any work) and gets its rows::

    query (..., Hq, L/P, E)   key (..., Hkv, S/P, E)   value (..., Hkv, S/P, Ev)
    -> out (..., Hq, L/P, Ev), the rows this process holds, in its layout

``layout="zigzag"`` means the caller's shards are already in zigzag order (rank r holds
chunks r and 2P-1-r of 2P equal chunks, :mod:`attnkit.ring.plan`); :func:`zigzag_shard`
and :func:`zigzag_unshard` convert. In the ring, step t, rank r holds the K/V block of
rank r - t (:mod:`.ring`).

Gathered over the processes the result equals the one-process core::

    attnkit.scaled_dot_product_attention(q_all, k_all, v_all, **core_kwargs)

with the core's keyword arguments (``is_causal``, ``scale``, ``enable_gqa``,
``causal_alignment``, ``window``, ``q_offset``/``kv_offset`` of the whole call,
``attn_mask`` as an :mod:`attnkit.masks` structure, ``score_mod``, ``impl``,
``block_size``); no dropout, weights or lse. Positional structures apply by absolute
position; segment ids are this process's shard of the ids; other masks carried by arrays
are refused in the ring (Ulysses takes them whole). Fully masked rows give 0 output and
0 gradient.

On one CPU machine, 4 gloo processes (paste and run; the tests run this script as it
is, and it prints the largest difference from one process)::

    cat > ring_torch.py <<'EOF'
    import torch
    import torch.distributed as dist

    import attnkit as ak
    from attnkit.backends.torch.distributed import ring_attention, zigzag_shard, zigzag_unshard

    dist.init_process_group("gloo")  # "nccl" with one GPU per process
    r, P = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(0)  # the same whole sequence in every process
    q, k, v = (torch.randn(1, 8, 2048, 64, generator=g) for _ in range(3))

    # This process's shard: chunks r and 2P-1-r of 2P (zigzag: causal work is balanced).
    ql, kl, vl = (zigzag_shard(x, r, P).requires_grad_() for x in (q, k, v))
    out = ring_attention(ql, kl, vl, is_causal=True)  # (1, 8, 2048 / P, 64): this shard's rows
    out.sum().backward()  # ql.grad, kl.grad, vl.grad: this shard's gradients

    shards = [torch.empty_like(out) for _ in range(P)]
    dist.all_gather(shards, out.detach())
    if r == 0:
        want = ak.scaled_dot_product_attention(q, k, v, is_causal=True)
        err = float((zigzag_unshard(shards) - want).abs().max())
        print(P, "processes, max |ring - one process| =", err)
    dist.destroy_process_group()
    EOF
    torchrun --standalone --nproc-per-node=4 ring_torch.py

Batch/head parallel (no sequence split) needs no collective: shard batch or heads with
DTensor (``distribute_tensor(x, mesh, [Shard(1)])``) and run the unchanged core on
``.to_local()`` tensors; ``DTensor.from_local`` puts the output back on the mesh.

Several hosts: the same script under ``torchrun --nnodes=N ...``. Give each ring its
own process group (``group=``) to run several at once.
"""

from __future__ import annotations

from typing import Any

from .checks import check_call
from .layout import zigzag_shard, zigzag_unshard
from .ring import ring_function
from .ulysses import ulysses_function

__all__ = ["ring_attention", "ulysses_attention", "zigzag_shard", "zigzag_unshard"]


def ring_attention(
    query: Any, key: Any, value: Any, *, group: Any = None, layout: str = "zigzag", **kwargs: Any
) -> Any:
    """Ring attention: this process's output shard (..., Hq, L/P, Ev).

    K/V shards travel around the ring (``dist.batch_isend_irecv``); each step's partial
    is the core's ``scaled_dot_product_attention(..., return_lse=True, q_offset,
    kv_offset)`` and partials merge with :func:`attnkit.merge_partials`. A step whose key
    block lies wholly outside the query shard's causal/window/mask region is skipped.
    The backward pass (a ``torch.autograd.Function``) saves only q, k, v, out and lse,
    rotates K, V, dK, dV and uses the core's backward from (out, lse), so per-process
    memory falls as 1/P in both passes. Any head count; L/P and S/P even for zigzag.

    Raises (on every rank, before any work): ``ShapeError`` when processes disagree on
    shapes or arguments (pad to a multiple of P, 2P for zigzag), ``DeviceMismatchError``
    for tensors on a device the group's backend does not carry, ``ParameterError`` for
    unsupported arguments, and the core's own errors.
    """
    call = check_call("ring_attention", query, key, value, group, layout, kwargs)
    return ring_function(call, layout, query, key, value)


def ulysses_attention(
    query: Any, key: Any, value: Any, *, group: Any = None, layout: str = "zigzag", **kwargs: Any
) -> Any:
    """Ulysses attention: this process's output shard (..., Hq, L/P, Ev).

    An all-to-all turns sequence shards into head shards (..., H/P, L, E), the unchanged
    core attends over the whole sequence, and a second all-to-all returns the sequence
    shard; both are differentiable. Hq and Hkv must divide by P (``ShapeError``
    otherwise, suggesting :func:`ring_attention`); memory per process is O(L) per head
    group, not O(L/P). The same layouts, arguments and errors as :func:`ring_attention`.
    """
    call = check_call("ulysses_attention", query, key, value, group, layout, kwargs)
    return ulysses_function(call, layout, query, key, value)
