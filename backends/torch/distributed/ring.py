"""Ring attention over torch.distributed: a ``torch.autograd.Function`` whose forward and
backward pass K/V blocks around the ring with ``dist.batch_isend_irecv``.

In step t = 0 .. P-1 rank r holds the key/value shard of rank (r - t) mod P and sends it
on to rank r + 1 while computing, for every (query piece i, key piece j) pair the mask
does not leave empty::

    forward   (o_ij, lse_ij) = core(q_i, k_j, v_j, return_lse=True, q_offset=pos(q_i), kv_offset=pos(k_j))
              (out_i, lse_i) = attnkit.merge_partials([out_i, o_ij], [lse_i, lse_ij])
    backward  (dq_ij, dk_j, dv_j) = partial_attention_vjp(q_i, k_j, v_j, out_i, lse_i, d_out_i)
              dq_i += dq_ij;  dK, dV travel with K, V and come home after one last hop

Saved for backward: the local q, k, v, output and lse, so memory divides by P.
"""  # noqa: E501

from __future__ import annotations

import dataclasses
import math
import weakref
from typing import Any

import torch
import torch.distributed as dist

import attnkit as ak
from attnkit.ring.backward import partial_attention_vjp
from attnkit.ring.plan import Piece, pair_is_empty, ring_structure, shard_pieces

from .checks import Call

__all__ = ["ring_function"]


def ring_function(call: Call, layout: str, q: Any, k: Any, v: Any) -> Any:
    """The local output shard (..., Hq, N/P, Ev) of ring attention, differentiable."""
    return _Ring.apply(_Plan(call, layout), q, k, v)


class _Plan:
    """Pieces, offsets and the non-empty (query piece, key piece) pairs of every step."""

    def __init__(self, call: Call, layout: str) -> None:
        kw = dict(call.kwargs)
        # The output's autograd node keeps this plan: the group is held weakly (group).
        self._group = weakref.ref(call.group)
        self.call, P, r = dataclasses.replace(call, group=None), call.world, call.rank
        q_off, kv_off = kw.pop("q_offset", 0), kw.pop("kv_offset", 0)
        if kw.pop("causal_alignment", "top_left") == "bottom_right":
            q_off += call.S - call.L  # bottom_right = top_left with q_offset + S - L
        self.q_offset, self.kv_offset = q_off, kv_off
        self.core = kw  # is_causal, scale, enable_gqa, window, attn_mask, impl, ...
        self.q_pieces = shard_pieces(layout, P, call.L)[r]
        kv_all = shard_pieces(layout, P, call.S)
        rule = ring_structure(
            kw.get("is_causal", False), kw.get("window"), attn_mask=kw.get("attn_mask")
        )  # top_left: bottom_right is folded into q_off above
        # steps[t]: (query piece i, key piece of the shard held in step t) pairs that do work
        self.steps: list[list[tuple[int, Piece]]] = []
        for t in range(P):
            held = kv_all[(r - t) % P]
            self.steps.append([(i, kp) for i, qp in enumerate(self.q_pieces)
                               for kp in held
                               if not pair_is_empty(rule, qp, kp, q_off, kv_off)])  # fmt: skip
        self.kv_pieces = kv_all

    @property
    def group(self) -> Any:
        """The call's process group, held weakly: an output kept alive (its autograd node
        holds this plan) must not keep the group's gloo threads running past
        ``destroy_process_group``, to be torn down while the interpreter exits."""
        group = self._group()
        if group is None:
            raise RuntimeError(
                "ring_attention: the process group of this call's forward was destroyed "
                "(torch.distributed.destroy_process_group) before its backward ran; run "
                "backward before destroying the group."
            )
        return group

    def offsets(self, qp: Piece, kp: Piece) -> dict[str, Any]:
        return {"q_offset": self.q_offset + qp.start, "kv_offset": self.kv_offset + kp.start}

    def pair(self, qp: Piece, kp: Piece, kv_ids: Any) -> dict[str, Any]:
        """The core's keyword arguments for one (query piece, key piece) pair: offsets,
        and with segment ids the two pieces' segments mask (& the positional mask)."""
        kw = {**self.core, **self.offsets(qp, kp)}
        seg = self.call.segments
        if seg is not None:
            ids = seg.piece(
                seg.q_ids[..., qp.local : qp.local + qp.length],
                kv_ids[..., kp.local : kp.local + kp.length],
            )  # (..., 1, n_q) against (..., 1, n_k)
            kw["attn_mask"] = ids if kw.get("attn_mask") is None else ids & kw["attn_mask"]
        return kw


def _rows(x: Any, piece: Piece) -> Any:
    return x[..., piece.local : piece.local + piece.length, :]  # (..., n_piece, E)


def _exchange(plan: _Plan, tensors: list[Any]) -> tuple[list[Any], list[Any]]:
    """Post sends of ``tensors`` to rank r + 1 and receives of as many from rank r - 1
    (group ranks); returns (buffers, requests): wait on the requests before reading."""
    g, P, r = plan.group, plan.call.world, plan.call.rank
    nxt, prv = dist.get_global_rank(g, (r + 1) % P), dist.get_global_rank(g, (r - 1) % P)
    sent = [t.contiguous() for t in tensors]  # kept alive until the requests finish
    bufs = [torch.empty_like(t) for t in sent]
    ops = [dist.P2POp(dist.isend, t, nxt, g) for t in sent]
    ops += [dist.P2POp(dist.irecv, b, prv, g) for b in bufs]
    reqs = dist.batch_isend_irecv(ops)
    return bufs, [*reqs, sent]


def _wait(reqs: list[Any]) -> None:
    for req in reqs[:-1]:
        req.wait()


class _Ring(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, plan: _Plan, q: Any, k: Any, v: Any) -> Any:
        call, p = plan.call, plan.call.local
        lead = tuple(p.out_lead)  # (..., Hq)
        outs: list[Any] = [None] * len(plan.q_pieces)
        lses: list[Any] = [None] * len(plan.q_pieces)
        seg = call.segments
        cur = [k, v] if seg is None else [k, v, seg.kv_ids]  # what travels: K, V (, ids)
        for t, pairs in enumerate(plan.steps):
            pending = _exchange(plan, cur) if t < call.world - 1 else None
            k_cur, v_cur, ids_cur = (*cur, None)[:3]
            for i, kp in pairs:
                qp = plan.q_pieces[i]
                o, lse = ak.scaled_dot_product_attention(
                    _rows(q, qp),
                    _rows(k_cur, kp),
                    _rows(v_cur, kp),
                    return_lse=True,
                    **plan.pair(qp, kp, ids_cur),
                )  # (..., Hq, n_i, Ev), (..., Hq, n_i)
                o = o.to(lse.dtype)  # accumulate in the compute dtype (float32 for 16-bit)
                if outs[i] is None:
                    outs[i], lses[i] = o, lse
                else:
                    outs[i], lses[i] = ak.merge_partials([outs[i], o], [lses[i], lse])
            if pending is not None:
                cur, reqs = pending
                _wait(reqs)
        cd = p.compute_dtype
        for i, qp in enumerate(plan.q_pieces):
            if outs[i] is None:  # no key anywhere in reach: output 0, lse -inf
                outs[i] = q.new_zeros((*lead, qp.length, p.Ev), dtype=cd)
                lses[i] = q.new_full((*lead, qp.length), -math.inf, dtype=cd)
        out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=-2)  # (..., Hq, N/P, Ev)
        lse = lses[0] if len(lses) == 1 else torch.cat(lses, dim=-1)  # (..., Hq, N/P)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.plan = plan
        return out.to(p.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, d_out: Any) -> tuple[Any, ...]:
        q, k, v, out, lse = ctx.saved_tensors
        plan: _Plan = ctx.plan
        call, cd = plan.call, plan.call.local.compute_dtype
        dq = torch.zeros(q.shape, dtype=cd, device=q.device)
        dk_cur = torch.zeros(k.shape, dtype=cd, device=k.device)
        dv_cur = torch.zeros(v.shape, dtype=cd, device=v.device)
        seg = call.segments
        cur = [k, v] if seg is None else [k, v, seg.kv_ids]  # what travels: K, V (, ids)
        for t, pairs in enumerate(plan.steps):
            pending = _exchange(plan, cur) if t < call.world - 1 else None
            k_cur, v_cur, ids_cur = (*cur, None)[:3]
            for i, kp in pairs:
                qp = plan.q_pieces[i]
                dq_b, dk_b, dv_b = partial_attention_vjp(
                    _rows(q, qp),
                    _rows(k_cur, kp),
                    _rows(v_cur, kp),
                    _rows(out, qp),
                    lse[..., qp.local : qp.local + qp.length],
                    _rows(d_out, qp),
                    **plan.pair(qp, kp, ids_cur),
                )  # query piece's, key piece's and value piece's shapes
                _rows(dq, qp).add_(dq_b)
                _rows(dk_cur, kp).add_(dk_b)
                _rows(dv_cur, kp).add_(dv_b)
            if pending is not None:
                cur, reqs = pending
                _wait(reqs)
            if call.world > 1:  # dK, dV follow K, V one hop (the last hop brings them home)
                (dk_cur, dv_cur), reqs = _exchange(plan, [dk_cur, dv_cur])
                _wait(reqs)
        return None, dq.to(q.dtype), dk_cur.to(k.dtype), dv_cur.to(v.dtype)
