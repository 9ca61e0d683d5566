"""``attention_vjp``: attention's output and its vector-Jacobian product, on any backend.

In the style of ``jax.vjp``, for every argument ``scaled_dot_product_attention`` takes
(weights and lse aside)::

    out, vjp = attnkit.attention_vjp(q, k, v, is_causal=True)
    dq, dk, dv = vjp(d_out)                  # (+ d_mask for an additive attn_mask)

``d_mask``, for a floating `attn_mask` (a learned bias), is summed over its broadcast
axes. The backward pass is written once in the array API, so NumPy and array-api-strict
arrays get gradients of attention with no autodiff. It keeps only the output and the row
log-sum-exp and, per block the forward visits, recomputes the weights
(:mod:`attnkit.blocked.backward`)::

    P = exp(scores - lse),  dV += P^T dO,  dS = P * (dO V^T - rowsum(dO * O)),
    dQ = scale dS K,  dK += scale dS^T Q

Fully masked rows give gradient 0; NaN or inf at masked positions never reaches a
gradient; dropout's keep pattern is redrawn from a copy of the generator. A general
`score_mod` callable is differentiated by the framework's autodiff on PyTorch and JAX,
and refused on NumPy (give a `ScoreMod` its `derivative`). The frameworks' autodiff (a
`torch.autograd.Function`, a `jax.custom_vjp`) runs this same backward pass;
`attnkit.explain(...).backward` says which one runs.

A NumPy training loop (plain SGD, no autodiff) that learns to copy the previous token:

.. code-block:: python

    import attnkit as ak

    rng = np.random.default_rng(0)
    L, V, D = 16, 8, 32  # sequence length, vocabulary, features
    pos = rng.standard_normal((L, D)) / np.sqrt(D)  # fixed positional features
    Wq, Wk = rng.standard_normal((2, D, D)) * 0.1  # the weights we learn
    losses = []
    for step in range(300):
        tokens = rng.integers(V, size=L)
        values = np.eye(V)[tokens]  # (L, V): one-hot tokens
        q, k = pos @ Wq, pos @ Wk  # (L, D)
        out, vjp = ak.attention_vjp(q, k, values, is_causal=True)  # (L, V): a mix of tokens
        target = np.eye(V)[np.roll(tokens, 1)][1:]  # copy the previous token
        p = (out[1:] * target).sum(-1)  # probability given to the right token
        losses.append(-np.log(p).mean())
        d_out = np.zeros_like(out)
        d_out[1:] = -target / p[:, None] / (L - 1)  # d loss / d out
        dq, dk, _ = vjp(d_out)
        Wq -= 5.0 * pos.T @ dq  # plain SGD through the projections
        Wk -= 5.0 * pos.T @ dk
    print(f"loss {losses[0]:.2f} -> {losses[-1]:.2f}")
    assert losses[-1] < 0.25 * losses[0]

`ak.multi_head_attention_vjp` does the same for a whole multi-head layer, with the
gradients of every weight and bias as a `MultiHeadParams`:

.. code-block:: python

    import attnkit as ak

    rng = np.random.default_rng(0)
    params = ak.init_multi_head_params(24, 4, rng=rng, dtype="float64")  # D = 24, 4 heads
    x = rng.standard_normal((2, 12, 24))  # (batch, L, D)
    y, vjp = ak.multi_head_attention_vjp(x, params=params, num_heads=4, is_causal=True)
    d_params = vjp(np.ones_like(y))[3]  # the gradients of every weight and bias
    assert d_params.q_weight.shape == params.q_weight.shape

The examples run on NumPy arrays, with NumPy imported as ``np``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from .blocked.accumulate import sum_to_shape
from .blocked.backward import blocked_backward
from .blocked.executor import forward, skipped_columns
from .blocked.operands import prepare_operands
from .blocked.tile_backward import tile_backward
from .call_checks import validate
from .errors import ParameterError, ShapeError
from .options import Options
from .plan import plan_of
from .problem import Problem, caller_layout
from .shapes import describe

__all__ = ["attention_vjp", "backward_from", "forward_saving"]


def attention_vjp(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    causal_alignment: str = "top_left",
    window: Any = None,
    q_offset: int = 0,
    kv_offset: int = 0,
    rng: Any = None,
    impl: str = "auto",
    block_size: int | None = None,
    score_mod: Any = None,
) -> tuple[Any, Callable[[Any], tuple[Any, ...]]]:
    """``(out, vjp)``: the output of :func:`attnkit.scaled_dot_product_attention` with
    these arguments (the same semantics, shapes and errors), and ``vjp(d_out)`` giving
    ``(dq, dk, dv)`` of the operands' shapes and dtypes, plus ``d_mask`` (the mask's shape
    and dtype) when ``attn_mask`` is a floating (additive) mask.

    Shapes: query (..., Hq, L, E), key (..., Hkv, S, E), value (..., Hkv, S, Ev);
    d_out (..., Hq, L, Ev), the output's shape. The gradient of a broadcast operand is
    summed over its broadcast axes; with GQA, dk and dv sum over each group's query heads
    (and over the key's heads for a value of one head, or the reverse: ``enable_gqa``
    broadcasts one head, as PyTorch repeats key and value heads separately).

    Formula (per block of query rows, the forward's blocks; see
    :mod:`attnkit.blocked.backward`): ``P = exp(scores - lse)``, ``dV = P^T dO``,
    ``dS = P * (dO V^T - rowsum(dO * O))``, ``dQ = scale dS K``, ``dK = scale dS^T Q``.
    Fully masked rows give exactly 0. With dropout, ``rng`` is copied before the forward
    draws (:meth:`Backend.replay_rng`) and the backward pass redraws the same keep
    pattern, never storing it; ``rng`` itself advances as one forward call would.
    ``score_mod``: its derivative is ALiBi's 1 and softcap's 1 - tanh^2; a general
    callable is differentiated by the backend's autodiff (PyTorch, JAX), and NumPy or
    array-api-strict refuse it in ``vjp`` (``ParameterError``). ``impl`` is validated as
    in the forward; both passes run the array-API blocked executor.

    ``vjp`` may be called several times (each call recomputes from the saved output and
    lse). It does not record gradients in a framework's autodiff: it returns arrays.
    """
    options = Options.of(locals())  # the non-array arguments, by name
    p = validate(query, key, value, options)
    replay = p.backend.replay_rng(p.rng) if p.dropout_p > 0 else None
    result, saved = forward_saving(p)

    mask_shape = getattr(attn_mask, "shape", None)  # an array's (not a structured mask's)
    mask_shape = None if p.mask is None or p.mask_is_bool or mask_shape is None else mask_shape

    def vjp(d_out: Any) -> tuple[Any, ...]:
        """(dq, dk, dv[, d_mask]) for the output's cotangent ``d_out``."""
        back = p if replay is None else replace(p, rng=p.backend.replay_rng(replay))
        grads = backward_from(back, saved, d_out)
        if p.key is not key or p.value is not value:  # one head broadcast (enable_gqa)
            dk, dv = (
                sum_to_shape(p.xp, g, tuple(x.shape))
                for g, x in zip(grads[1:3], (key, value), strict=True)
            )
            grads = (grads[0], dk, dv, *grads[3:])
        if mask_shape is None or tuple(grads[3].shape) == tuple(mask_shape):
            return grads
        # a 0-D or 1-D mask was validated as (1, 1) or (1, S): its gradient in its own shape
        return (*grads[:3], p.xp.reshape(grads[3], tuple(mask_shape)))

    return result, vjp


def forward_saving(p: Problem) -> tuple[Any, tuple[Any, ...]]:
    """``(out, saved)``: the output in the caller's layout and dtype, and what the
    backward pass keeps: the executor's output ``o`` (..., L, Ev) and its row statistics
    in the compute dtype and the GQA layout (the tiles' (m, l), or row blocks' lse: the
    plan decides, :func:`attnkit.plan.plan_of`). ``p.rng`` draws the dropout (copy it
    first with ``Backend.replay_rng`` to redraw it in :func:`backward_from`)."""
    fwd = _saving(p)
    out, _, _, stats = forward(fwd, plan_of(fwd))  # (..., L, Ev) and (..., L) each: GQA layout
    return caller_layout(p, out, (p.L, p.Ev), p.dtype), (out, *stats)


def backward_from(
    p: Problem,
    saved: tuple[Any, ...],
    d_out: Any,
    mask_grad: bool = True,
    whole_rows: bool = True,
) -> tuple[Any, ...]:
    """(dq, dk, dv[, d_mask]) in the operands' shapes and dtypes, from what
    :func:`forward_saving` kept, or from ``(out, lse)`` of a larger call whose keys are
    only partly these (``whole_rows=False``, :mod:`attnkit.ring.backward`);
    ``p.rng`` must redraw the forward's dropout. ``mask_grad=False``: no d_mask (None in
    its place) for an additive mask that needs no gradient."""
    out = saved[0]
    shape = (*p.out_lead, p.L, p.Ev)
    d = _layout_cotangent(p, d_out, shape, tuple(out.shape))
    back = _saving(p)
    plan = plan_of(back)
    ops = prepare_operands(back, plan.kernels)
    if p.L == 0 or p.S == 0:
        grads = _zeros(p, ops)
    else:
        xp = p.xp
        if plan.strategy == "tiles":
            if len(saved) == 3:
                stats = (saved[1], saved[2])  # the forward's (m, l)
            else:  # the lse of a larger call: exp(s - lse) as it stands
                lse = saved[1]
                stats = (lse, xp.where(lse == -math.inf, 0.0, xp.ones_like(lse)))
            grads = tile_backward(back, ops, plan.table, out, stats, d, mask_grad)
        else:
            lse = saved[1]
            columns = skipped_columns(back, ops, plan)
            grads = blocked_backward(
                back, ops, out, lse, d, plan.rows, mask_grad, whole_rows, columns, plan.kernels
            )
    return _caller_gradients(p, *grads)


def _saving(p: Problem) -> Problem:
    """The call as both passes run it, with lse: the array-API executor, or the
    backend's block kernels where they give the lse and a fused backward (PyTorch's
    CPU flash attention, ``Kernels.block_lse``)."""
    impl = "generic" if p.impl == "reference" else p.impl
    return replace(p, need_lse=True, need_weights=False, impl=impl)


def _layout_cotangent(
    p: Problem, d_out: Any, shape: tuple[int, ...], inner: tuple[int, ...]
) -> Any:
    """``d_out`` checked against the output's shape, in the compute dtype and the GQA
    layout of the executor's output (..., [Hkv, G,] L, Ev)."""
    xp = p.xp
    if getattr(d_out, "shape", None) is None or tuple(d_out.shape) != shape:
        raise ShapeError(
            f"vjp got d_out {describe(d_out)}, but the output has shape {shape}; pass the "
            "gradient of the loss with respect to the output, of the output's shape."
        )
    if not xp.isdtype(d_out.dtype, "real floating"):
        raise ParameterError(
            f"vjp got d_out {describe(d_out)}; pass a real floating array (the output's "
            f"dtype, {p.dtype})."
        )
    d = d_out if d_out.dtype == p.compute_dtype else xp.astype(d_out, p.compute_dtype)
    if tuple(d.shape) != inner:
        if p.gqa_groups > 1:  # (..., Hq, L, Ev) -> (..., Hkv, G, L, Ev)
            *batch, heads, L, Ev = d.shape
            d = xp.reshape(d, (*batch, heads // p.gqa_groups, p.gqa_groups, L, Ev))
        d = sum_to_shape(xp, d, inner) if tuple(d.shape) != inner else d
    return d


def _zeros(p: Problem, ops: Any) -> tuple[Any, Any, Any, Any]:
    """Zero gradients of a call with no query row or no key (L = 0 or S = 0)."""
    xp, cd = p.xp, p.compute_dtype
    zeros = [xp.zeros(tuple(x.shape), dtype=cd, device=p.device)
             for x in (ops.query, ops.key, ops.value)]  # fmt: skip
    d_mask = None
    if ops.additive is not None:
        d_mask = xp.zeros(tuple(ops.additive.shape), dtype=cd, device=p.device)
    return zeros[0], zeros[1], zeros[2], d_mask


def _caller_gradients(p: Problem, dq: Any, dk: Any, dv: Any, d_mask: Any) -> tuple[Any, ...]:
    """The gradients in the operands' own shapes and dtypes: GQA's (Hkv, G) merged back
    into Hq for dq and the group axis dropped from dk and dv."""
    xp = p.xp
    grads = [
        _reshaped(xp, dq, p.query),
        _reshaped(xp, dk, p.key),
        _reshaped(xp, dv, p.value),
    ]
    if p.mask is not None and not p.mask_is_bool:
        grads.append(None if d_mask is None else _reshaped(xp, d_mask, p.mask))
    return tuple(grads)


def _reshaped(xp: Any, grad: Any, like: Any) -> Any:
    """``grad`` (the operand in the GQA layout) as ``like``'s shape and dtype."""
    shape = tuple(like.shape)
    if tuple(grad.shape) != shape:
        grad = xp.reshape(grad, shape)
    return grad if grad.dtype == like.dtype else xp.astype(grad, like.dtype)
