"""The per-device bodies of ring attention (under ``jax.shard_map``), forward and backward.

Device r of P holds q_r and, at step t, the key/value shard of device s = (r - t) mod P;
after each step K and V move on one device (``jax.lax.ppermute``). Forward, per step:
``core(q_r, K_s, V_s, return_lse=True, q_offset=..., kv_offset=...)`` folded in by
``attnkit.merge_partials``. Backward, per step: ``partial_attention_vjp`` from the saved
``(out, lse)`` gives dq's share and dK, dV, which travel with K, V and come home after
one last move.

The core needs the offsets as Python ints, and they differ per device: devices with equal
static work (:meth:`RingPlan.signature`) share one branch of a ``jax.lax.switch`` on
``jax.lax.axis_index``; empty pairs are not traced. The P steps are unrolled in Python.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import attnkit as ak
from attnkit.ring.backward import partial_attention_vjp
from attnkit.ring.plan import Piece, Segments, pair_is_empty

from .layout import pair_is_full

__all__ = ["Pair", "RingPlan", "ring_backward", "ring_forward"]


#: One pair of a step's work: (query piece index, key piece index, q_offset, kv_offset),
#: offsets None for a fully allowed pair computed without structure.
Pair = tuple[int, int, int | None, int | None]

_STRUCTURE_KWARGS = ("is_causal", "window", "attn_mask")


@dataclass(frozen=True)
class RingPlan:
    """Everything static about one ring call: the mesh axis and its size P, the pieces
    of every shard for queries and keys, the whole call's offsets, the structure used
    for the skip table, and the core's keyword arguments (masks already placed)."""

    axis: str
    parts: int
    q_pieces: list[list[Piece]]
    k_pieces: list[list[Piece]]
    q_offset: int
    kv_offset: int
    structure: Any
    core_kwargs: dict[str, Any] = field(default_factory=dict)
    #: the segments mask's leading dims when the call has segment ids (q_ids, kv_ids
    #: then come in beside q, k, v, and kv_ids travel with K, V), else None
    segments: tuple[int, ...] | None = None

    def live_pairs(self, r: int, s: int) -> list[tuple[Piece, Piece]]:
        """The (query piece of shard r, key piece of shard s) pairs that do work."""
        return [
            (qp, kp)
            for qp in self.q_pieces[r]
            for kp in self.k_pieces[s]
            if not pair_is_empty(self.structure, qp, kp, self.q_offset, self.kv_offset)
        ]

    def signature(self, r: int, s: int) -> tuple[Pair, ...]:
        """What device r computes against shard s: its live pairs with their offsets,
        or None offsets where the pair is fully allowed and no score_mod reads positions
        (then the same computation serves every device holding such a pair)."""
        out = []
        for qp, kp in self.live_pairs(r, s):
            qi, ki = self.q_pieces[r].index(qp), self.k_pieces[s].index(kp)
            no_mod = self.core_kwargs.get("score_mod") is None
            plain = (
                no_mod
                and self.segments is None
                and pair_is_full(self.structure, qp, kp, self.q_offset, self.kv_offset)
            )
            q_at, kv_at = self.q_offset + qp.start, self.kv_offset + kp.start
            if plain:
                out.append((qi, ki, None, None))
            elif no_mod and self.structure is None:  # segment ids only: positions unread
                out.append((qi, ki, 0, 0))
            elif no_mod and self.structure.translation_invariant:  # (a score_mod: below)
                # causal and windows read kv position - q position only: canonical offsets
                # make equal work on different devices one traced computation
                rel = kv_at - q_at
                out.append((qi, ki, max(0, -rel), max(0, rel)))
            else:
                out.append((qi, ki, q_at, kv_at))
        return tuple(out)

    def kwargs(
        self, pair: Pair, ids: tuple[Any, Any] | None = None, pieces: Any = None
    ) -> dict[str, Any]:
        """The core's keyword arguments for one pair (no structure for a plain pair);
        with segment ids ``ids`` (this shard's q_ids (..., 1, Lr), the visiting shard's
        kv_ids (..., 1, Sr)) and the pair's (query piece, key piece), the two pieces'
        segments mask, & the positional mask."""
        _, _, q_offset, kv_offset = pair
        if q_offset is None:
            return {k: v for k, v in self.core_kwargs.items() if k not in _STRUCTURE_KWARGS}
        kw = {**self.core_kwargs, "q_offset": q_offset, "kv_offset": kv_offset}
        if self.segments is not None and ids is not None:
            qp, kp = pieces
            mask = Segments(None, None, self.segments).piece(
                ids[0][..., qp.local : qp.local + qp.length],
                ids[1][..., kp.local : kp.local + kp.length],
            )  # (..., 1, n_q) against (..., 1, n_k)
            kw["attn_mask"] = mask if kw.get("attn_mask") is None else mask & kw["attn_mask"]
        return kw


def _rows(x: Any, piece: Piece) -> Any:
    return x[..., piece.local : piece.local + piece.length, :]  # (..., piece, F)


def _step(
    plan: RingPlan, t: int, make: Callable[[int, int, tuple[Pair, ...]], Callable[..., Any]],
    *args: Any,
) -> Any:  # fmt: skip
    """Step t on this device: device r computes ``make(r, s, signature)`` for s = (r - t)
    mod P. Devices with the same signature share one branch; one branch runs directly,
    several through ``lax.switch`` on a static table indexed by ``axis_index``."""
    import jax
    import jax.numpy as jnp

    P = plan.parts
    signatures = [plan.signature(r, (r - t) % P) for r in range(P)]
    unique = list(dict.fromkeys(signatures))
    branches = []
    for sig in unique:
        r = signatures.index(sig)
        branches.append(make(r, (r - t) % P, sig))
    if len(branches) == 1:
        return branches[0](*args)
    table = jnp.asarray([unique.index(sig) for sig in signatures], dtype=jnp.int32)  # (P,)
    return jax.lax.switch(table[jax.lax.axis_index(plan.axis)], branches, *args)


def _forward_pair(plan: RingPlan, r: int, s: int, sig: tuple[Pair, ...]) -> Callable[..., Any]:
    """(o, lse) of shard r's queries against shard s's keys: (..., Hq, Lr, Ev), (..., Hq, Lr)."""
    import jax.numpy as jnp

    def run(q: Any, k: Any, v: Any, ids: Any, empty: tuple[Any, Any]) -> tuple[Any, Any]:
        outs, lses = [], []
        for qi, qp in enumerate(plan.q_pieces[r]):
            parts = [
                ak.scaled_dot_product_attention(
                    _rows(q, qp),
                    _rows(k, plan.k_pieces[s][pair[1]]),
                    _rows(v, plan.k_pieces[s][pair[1]]),
                    return_lse=True,
                    **plan.kwargs(pair, ids, (qp, plan.k_pieces[s][pair[1]])),
                )
                for pair in sig
                if pair[0] == qi
            ]
            if not parts:  # nothing to attend: out 0, lse -inf (the merge ignores it)
                outs.append(_rows(empty[0], qp))
                lses.append(empty[1][..., qp.local : qp.local + qp.length])
                continue
            o, lse = parts[0] if len(parts) == 1 else ak.merge_partials(*zip(*parts, strict=True))
            outs.append(o)
            lses.append(lse)
        if len(outs) == 1:
            return outs[0], lses[0]
        return jnp.concatenate(outs, axis=-2), jnp.concatenate(lses, axis=-1)  # (..., Lr, Ev)

    return run


def _empty(plan: RingPlan, q: Any, k: Any, v: Any) -> tuple[Any, Any]:
    """out 0 (..., Hq, Lr, Ev) and lse -inf (..., Hq, Lr), of the core's shapes/dtypes."""
    import jax
    import jax.numpy as jnp

    kwargs = {key: val for key, val in plan.core_kwargs.items() if key in ("enable_gqa", "scale")}
    shapes = jax.eval_shape(
        lambda q, k, v: ak.scaled_dot_product_attention(q, k, v, return_lse=True, **kwargs),
        q,
        k,
        v,
    )
    out = jnp.zeros(shapes[0].shape, shapes[0].dtype)
    return out, jnp.full(shapes[1].shape, -jnp.inf, shapes[1].dtype)


def ring_forward(
    plan: RingPlan, q: Any, k: Any, v: Any, q_ids: Any = None, kv_ids: Any = None
) -> tuple[Any, Any]:
    """Per-device forward: q (..., Hq, Lr, E), k (..., Hkv, Sr, E), v (..., Hkv, Sr, Ev)
    local shards -> (out (..., Hq, Lr, Ev), lse (..., Hq, Lr)) over all keys, both in
    the core's compute dtype (float32 for 16-bit inputs: the merges do not round to 16
    bits; the caller casts the output)."""
    import jax

    P = plan.parts
    perm = [(i, (i + 1) % P) for i in range(P)]  # r sends to r + 1
    empty = _empty(plan, q, k, v)
    acc = None
    for t in range(P):
        ids = None if q_ids is None else (q_ids, kv_ids)
        o, lse = _step(plan, t, partial(_forward_pair, plan), q, k, v, ids, empty)
        o = o.astype(lse.dtype)  # merge in the compute dtype (float32 for 16-bit inputs)
        acc = (o, lse) if acc is None else ak.merge_partials([acc[0], o], [acc[1], lse])
        if t < P - 1:  # segment ids (None when absent) travel with K and V
            k, v, kv_ids = jax.lax.ppermute((k, v, kv_ids), plan.axis, perm)
    return acc


def _backward_pair(plan: RingPlan, r: int, s: int, sig: tuple[Pair, ...]) -> Callable[..., Any]:
    """(dq share, dk, dv) of shard r's queries against shard s's keys, local shapes."""
    import jax.numpy as jnp

    def run(
        q: Any, k: Any, v: Any, out: Any, lse: Any, d_out: Any, ids: Any
    ) -> tuple[Any, Any, Any]:
        dq: list[Any] = [None] * len(plan.q_pieces[r])
        dk: list[Any] = [None] * len(plan.k_pieces[s])
        dv: list[Any] = [None] * len(plan.k_pieces[s])
        for pair in sig:
            qi, ki = pair[0], pair[1]
            qp, kp = plan.q_pieces[r][qi], plan.k_pieces[s][ki]
            rows = slice(qp.local, qp.local + qp.length)
            g = partial_attention_vjp(
                _rows(q, qp), _rows(k, kp), _rows(v, kp), out[..., rows, :], lse[..., rows],
                d_out[..., rows, :], **plan.kwargs(pair, ids, (qp, kp)),
            )  # fmt: skip
            for acc, i, grad in ((dq, qi, g[0]), (dk, ki, g[1]), (dv, ki, g[2])):
                acc[i] = grad if acc[i] is None else acc[i] + grad

        def assemble(acc: list[Any], pieces: list[Piece], like: Any) -> Any:
            parts = [
                jnp.zeros_like(_rows(like, p)) if a is None else a
                for a, p in zip(acc, pieces, strict=True)
            ]
            return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=-2)

        return (
            assemble(dq, plan.q_pieces[r], q),  # (..., Hq, Lr, E)
            assemble(dk, plan.k_pieces[s], k),  # (..., Hkv, Sr, E)
            assemble(dv, plan.k_pieces[s], v),  # (..., Hkv, Sr, Ev)
        )

    return run


def ring_backward(
    plan: RingPlan,
    q: Any,
    k: Any,
    v: Any,
    out: Any,
    lse: Any,
    d_out: Any,
    q_ids: Any = None,
    kv_ids: Any = None,
) -> tuple[Any, Any, Any]:
    """Per-device backward from the saved (out, lse): local (dq, dk, dv) of q's, k's and
    v's local shapes. dK, dV of the visiting shard travel with K, V; after the last step
    one more move brings them home (P moves of dK, dV, P - 1 of K, V)."""
    import jax

    P = plan.parts
    perm = [(i, (i + 1) % P) for i in range(P)]
    cd = lse.dtype  # accumulate (and send dK, dV) in the compute dtype: float32 for 16-bit
    dq = dk = dv = None
    for t in range(P):
        ids = None if q_ids is None else (q_ids, kv_ids)
        g = _step(plan, t, partial(_backward_pair, plan), q, k, v, out, lse, d_out, ids)
        g = tuple(x.astype(cd) for x in g)
        dq = g[0] if dq is None else dq + g[0]
        dk = g[1] if dk is None else dk + g[1]
        dv = g[2] if dv is None else dv + g[2]
        if t < P - 1:
            k, v, dk, dv, kv_ids = jax.lax.ppermute((k, v, dk, dv, kv_ids), plan.axis, perm)
        elif P > 1:
            dk, dv = jax.lax.ppermute((dk, dv), plan.axis, perm)
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype)
