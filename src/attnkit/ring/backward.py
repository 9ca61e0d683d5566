"""The backward pass of one key block of attention, from the whole call's output and lse.

When attention over keys split into pieces is merged by log-sum-exp (ring attention,
key-blocked execution), the gradient splits by piece too. For one piece's keys
``K_b, V_b`` and the whole call's ``O`` and ``lse``::

    P_b  = exp(scale q K_b^T - lse)      where allowed, else 0     # (..., L, S_b)
    dV_b = P_b^T dO                                                # (..., S_b, Ev)
    dS_b = P_b * (dO V_b^T - rowsum(dO * O))                       # (..., L, S_b)
    dQ  += scale dS_b K_b      (summed over the pieces gives dQ)   # (..., L, E)
    dK_b = scale dS_b^T q                                          # (..., S_b, E)

Only ``(O, lse)`` of the whole call is needed. Rows with ``lse = -inf`` get exactly 0.
"""

from __future__ import annotations

from typing import Any

from ..call_checks import validate
from ..errors import ParameterError, ShapeError
from ..options import Options
from ..shapes import describe
from ..vjp import backward_from

__all__ = ["partial_attention_vjp"]


def partial_attention_vjp(
    query: Any,
    key: Any,
    value: Any,
    out: Any,
    lse: Any,
    d_out: Any,
    attn_mask: Any = None,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    causal_alignment: str = "top_left",
    window: Any = None,
    q_offset: int = 0,
    kv_offset: int = 0,
    impl: str = "auto",
    block_size: int | None = None,
    score_mod: Any = None,
) -> tuple[Any, Any, Any]:
    """``(dq_b, dk_b, dv_b)``: this key block's share of attention's gradients.

    Shapes: query (..., Hq, L, E), key (..., Hkv, S_b, E), value (..., Hkv, S_b, Ev) as
    in :func:`attnkit.scaled_dot_product_attention` (the same keyword arguments and
    errors; no dropout); ``out`` (..., Hq, L, Ev) and ``lse`` (..., Hq, L) the output
    and log-sum-exp of attention over all keys (this block and others, merged), and
    ``d_out`` (..., Hq, L, Ev) its cotangent. Returns dq_b of the query's shape (add the
    blocks' dq_b for the whole dq), dk_b and dv_b of key's and value's shapes (exact).
    ``q_offset`` / ``kv_offset`` place the block, so causal, windows and
    :mod:`attnkit.masks` structures apply by absolute position. Formula: the module's
    docstring. A float (additive) ``attn_mask`` is refused here (no d_mask is returned).
    """
    p = validate(query, key, value, Options.of(locals()))  # no dropout, weights or lse
    if p.mask is not None and not p.mask_is_bool:
        raise ParameterError(
            "partial_attention_vjp takes bool or structured masks only, got a float "
            f"(additive) attn_mask {describe(p.mask)}; pass a bool mask or an attnkit.masks "
            "structure."
        )
    xp, cd = p.xp, p.compute_dtype
    shape = (*p.out_lead, p.L, p.Ev)  # (..., Hq, L, Ev)
    for name, x, want in (("out", out, shape), ("lse", lse, shape[:-1])):
        if getattr(x, "shape", None) is None or tuple(x.shape) != want:
            raise ShapeError(
                f"partial_attention_vjp got {name} {describe(x)}, but the call's output has "
                f"shape {shape}; pass {name} of shape {want}, from the merged attention over "
                "all keys (return_lse=True)."
            )
    out = out if out.dtype == cd else xp.astype(out, cd)
    lse = lse if lse.dtype == cd else xp.astype(lse, cd)
    if p.gqa_groups > 1:  # the executor's GQA layout: (..., Hq, L[, Ev]) -> (..., Hkv, G, L[, Ev])
        *batch, heads, L, Ev = out.shape
        groups = p.gqa_groups
        out = xp.reshape(out, (*batch, heads // groups, groups, L, Ev))  # (..., Hkv, G, L, Ev)
        lse = xp.reshape(lse, (*batch, heads // groups, groups, L))  # (..., Hkv, G, L)
    grads = backward_from(p, (out, lse), d_out, mask_grad=False, whole_rows=False)
    return grads[0], grads[1], grads[2]
