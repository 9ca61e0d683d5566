"""Dispatch: running a validated call by its plan, and the caches of repeated calls.

The call's plan (:mod:`attnkit.plan`) says which path runs. Plain calls (no dropout,
score_mod, weights, lse or block size; no mask, or a mask array; no window, or one of
ints) whose signature was seen before reuse its validation and plan (the plan where the
backend has no autodiff), and where it went to the whole-call kernel, go straight to it:
a decoding loop pays for its checks and dispatch once. The caches hold at most 64
signatures each and no arrays; nothing is cached while ``torch.compile`` traces.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import array_api_compat as aac

from .blocked import blocked_attention
from .compiling import tracing
from .options import Options
from .plan import Plan, plan_of
from .problem import Problem
from .reference import reference_attention
from .registry import backend_for
from .vjp import backward_from, forward_saving

__all__ = ["attend", "compiler_of", "known_problem", "planned", "signature"]

_CACHE_MAX = 64
#: Problems of validated plain signatures, their arrays dropped.
_VALIDATED: dict[tuple[Any, ...], Problem] = {}
#: The backend's plan (a function of query, key, value) of plain signatures that went
#: to its whole-call kernel.
_PLANS: dict[tuple[Any, ...], Any] = {}
#: attnkit's plan of plain signatures on backends without autodiff (elsewhere a plan may
#: read whether the call records gradients, which the signature does not hold).
_PLANNED: dict[tuple[Any, ...], Plan] = {}


def signature(query: Any, key: Any, value: Any, o: Options) -> tuple[Any, ...] | None:
    """What decides a plain call's validation, or None where it cannot be told cheaply
    (types other than the exact builtins, arrays without a ``device`` attribute such as
    JAX tracers, a mask of another type or of fewer than two axes): such calls are
    validated in full every time."""
    t, mask = type(query), o.attn_mask
    if mask is not None and (type(mask) is not t or len(mask.shape) < 2):
        return None
    if not (
        type(key) is t
        and type(value) is t
        and type(o.is_causal) is bool
        and type(o.enable_gqa) is bool
        and (o.scale is None or type(o.scale) is float)
        and type(o.q_offset) is int
        and type(o.kv_offset) is int
        and type(o.impl) is str
        and type(o.causal_alignment) is str
        and _plain_window(o.window)
    ):
        return None
    try:
        # shapes as they come: tuples, or torch.Size (a tuple subclass, hashed alike)
        masked = () if mask is None else (mask.shape, mask.dtype, mask.device)
        return (t, query.shape, key.shape, value.shape, query.dtype, key.dtype, value.dtype,
                query.device, key.device, value.device, o.is_causal, o.scale, o.enable_gqa,
                o.causal_alignment, o.q_offset, o.kv_offset, o.impl, o.window, *masked)  # fmt: skip
    except (AttributeError, TypeError, RuntimeError, ValueError):  # tracers, unhashable
        return None


def _plain_window(window: Any) -> bool:
    """None, an int, or a pair of ints or None (exactly those types: ``True`` is no
    window size): a window the signature holds by value. A mask object given as the
    window is validated on every call."""
    if window is None or type(window) is int:
        return True
    return (
        type(window) is tuple
        and len(window) == 2
        and all(w is None or type(w) is int for w in window)
    )


def planned(
    query: Any, key: Any, value: Any, options: Options
) -> tuple[Any, tuple[Any, ...] | None]:
    """``(out, sig)``: the output where a plain call's signature has a plan that computed
    it (else None), and the call's signature (None unless the call is plain)."""
    o = options
    if (
        o.score_mod is not None
        or o.block_size is not None
        or o.return_weights is not False
        or o.return_lse is not False
        or type(o.dropout_p) not in (float, int)
        or o.dropout_p != 0
        or tracing()  # torch.compile: no caches in the graph
    ):
        return None, None
    sig = signature(query, key, value, o)
    plan = None if sig is None else _PLANS.get(sig)
    if plan is None:
        return None, sig
    mask = o.attn_mask
    return (plan(query, key, value) if mask is None else plan(query, key, value, mask)), sig


def compiler_of(query: Any) -> Any:
    """The backend of ``query``'s library where it compiles calls (``Backend.compile``:
    JAX) or has them traced into one operator (``Backend.traced_call``: PyTorch under
    ``torch.compile``), else None: NumPy and array-api-strict run as they are, and what
    is no array is named by validation."""
    try:
        backend = backend_for(aac.array_namespace(query))
    except TypeError:
        return None
    return backend if backend.compile is not None or backend.traced_call is not None else None


def known_problem(
    sig: tuple[Any, ...] | None, query: Any, key: Any, value: Any, mask: Any = None
) -> Any:
    """The Problem of an already validated plain signature, for these arrays, or None."""
    known = None if sig is None else _VALIDATED.get(sig)
    if known is None:
        return None
    return replace(known, query=query, key=key, value=value, mask=mask)


def attend(p: Problem, sig: tuple[Any, ...] | None = None) -> tuple[Any, Any, Any]:
    """(out, weights or None, lse or None) of a validated call, by its plan
    (:func:`attnkit.plan.plan_of`): the output in the caller's layout (..., Hq, L, Ev)
    from the whole-call kernel, else in the executors' compute dtype and GQA layout.
    ``sig``: the call's plain signature, remembered."""
    if sig is not None and sig not in _VALIDATED:
        _remember(_VALIDATED, sig, replace(p, query=None, key=None, value=None, mask=None))
    plan = None if sig is None else _PLANNED.get(sig)
    if plan is None:
        plan = plan_of(p)
        if sig is not None and p.backend.custom_vjp is None:
            _remember(_PLANNED, sig, plan)
    if plan.strategy == "reference":
        return reference_attention(p)
    if plan.strategy == "whole call":
        kernel_args = dict(mask=p.mask, causal=plan.causal, scale=p.scale, gqa=p.gqa_groups > 1)
        out = plan.kernels.attention(p.query, p.key, p.value, **kernel_args)
        if out is not None:
            if sig is not None and sig not in _PLANS:
                _remember_plan(sig, p, plan, kernel_args)
            return out, None, None
        # declined on the values (a NaN at a masked position): the executor, guarded
        return blocked_attention(p, plan_of(p, whole_call=False))
    # differentiated by attnkit's own backward pass (None where nothing records
    # gradients): under autograd the blocked kernels' forward would leave autodiff to
    # differentiate the kernels block by block, no faster than attnkit's backward from
    # the saved output and lse (bench --backward, target 2), and without lse
    out = differentiable_attention(p)
    if out is not None:
        return out, None, None
    return blocked_attention(p, plan)


def _remember_plan(sig: tuple[Any, ...], p: Problem, plan: Plan, kernel_args: dict) -> None:
    """Keep the whole-call kernel's plan for ``sig``: the backend's own plan without a
    mask; with one, the kernel with this call's other arguments bound (it still checks
    what it checks per call, such as a finite output where pairs are masked)."""
    kernels = plan.kernels
    if p.mask is None:
        if kernels.attention_plan is None:
            return
        del kernel_args["mask"]
        plan = kernels.attention_plan(p.query, p.key, p.value, **kernel_args)
    else:
        del kernel_args["mask"]
        attention = kernels.attention

        def plan(query: Any, key: Any, value: Any, mask: Any) -> Any:
            return attention(query, key, value, mask=mask, **kernel_args)

    if plan is not None:
        _remember(_PLANS, sig, plan)


def _remember(cache: dict[tuple[Any, ...], Any], sig: tuple[Any, ...], value: Any) -> None:
    if len(cache) >= _CACHE_MAX:
        cache.clear()
    cache[sig] = value


def differentiable_attention(p: Problem) -> Any:
    """The output (caller's layout and dtype) of ``p`` through the backend's own
    autodiff with this module's backward pass (``Backend.custom_vjp``: a PyTorch
    ``autograd.Function``, a ``jax.custom_vjp``), saving q, k, v, the output and lse
    only; or None where the backend does not differentiate this call (no autodiff, not
    recording gradients, weights or lse asked for)."""
    hook = p.backend.custom_vjp
    if hook is None or p.need_weights or p.need_lse:
        return None
    additive = p.mask is not None and not p.mask_is_bool
    # every array of the call is an operand (a bool mask too: no cotangent), so that a
    # traced mask is never closed over by the backward pass
    arrays = (p.query, p.key, p.value, *(() if p.mask is None else (p.mask,)))
    replay = p.backend.replay_rng(p.rng) if p.dropout_p > 0 else None

    def bound(arrays: tuple[Any, ...], rng: Any) -> Problem:
        mask = arrays[3] if len(arrays) > 3 else None
        return replace(p, query=arrays[0], key=arrays[1], value=arrays[2], mask=mask, rng=rng)

    def forward(*arrays: Any) -> tuple[Any, tuple[Any, Any]]:
        return forward_saving(bound(arrays, p.rng))

    def backward(
        arrays: tuple[Any, ...], saved: tuple[Any, Any], d_out: Any, needs: tuple[bool, ...]
    ) -> tuple[Any, ...]:
        rng = None if replay is None else p.backend.replay_rng(replay)
        mask_grad = additive and needs[3]
        grads = backward_from(bound(arrays, rng), saved, d_out, mask_grad)
        return grads if len(grads) == len(arrays) else (*grads, None)  # a bool mask: None

    return hook(forward, backward, *arrays, random=p.dropout_p > 0)
