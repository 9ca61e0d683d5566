"""``multi_head_attention_vjp``: a multi-head layer's output and its vector-Jacobian
product with respect to the inputs and every parameter, on any backend (no autodiff).

The projections are linear, so their backward pass is three matrix products each; the
attention in the middle is :func:`attnkit.attention_vjp`::

    y = merge(attend(heads(xq Wq^T + bq), heads(xk Wk^T + bk), heads(xv Wv^T + bv))) Wo^T + bo
    dWo = dy^T merged,  dbo = sum dy,  d_merged = dy Wo
    dq, dk, dv = attention_vjp(...)(heads(d_merged))
    dWq = merge(dq)^T xq,  dbq = sum merge(dq),  dxq = merge(dq) Wq    (and k, v alike)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from array_api_compat import array_namespace

from ..errors import ParameterError, ShapeError
from ..shapes import describe
from ..vjp import attention_vjp
from .checks import check_call, check_inputs
from .layer import _heads, _linear, _merge_heads
from .masks import check_masks, combine_masks
from .params import MultiHeadParams

__all__ = ["multi_head_attention_vjp"]


def multi_head_attention_vjp(
    query: Any,
    key: Any = None,
    value: Any = None,
    params: MultiHeadParams | None = None,
    *,
    num_heads: int,
    num_kv_heads: int | None = None,
    key_padding_mask: Any = None,
    attn_mask: Any = None,
    is_causal: bool = False,
    causal_alignment: str = "top_left",
    window: Any = None,
    dropout_p: float = 0.0,
    rng: Any = None,
    scale: float | None = None,
    impl: str = "auto",
) -> tuple[Any, Callable[[Any], tuple[Any, Any, Any, MultiHeadParams]]]:
    """``(output, vjp)`` of :func:`attnkit.multi_head_attention` with these arguments
    (the same shapes and semantics; no weights, cache, RoPE or extra keys), and
    ``vjp(d_output)`` giving ``(d_query, d_key, d_value, d_params)``: d_key and d_value
    None for self-attention (``key`` None: their gradients are in d_query), d_value None
    when ``value`` is None (in d_key); ``d_params`` a :class:`MultiHeadParams` of the
    gradients of the parameters ``params`` holds (None where it holds none).

    Shapes: query (..., L, Dq), key (..., S, Dk), value (..., S, Dv); output and
    d_output (..., L, Do). A NumPy training step::

        out, vjp = ak.multi_head_attention_vjp(x, params=params, num_heads=4)
        dx, _, _, grads = vjp(d_out)
        params = ak.MultiHeadParams(*(w if g is None else w - lr * g
                                      for w, g in zip(params, grads)))
    """
    check_call(query, key, value, None, {"is_causal": is_causal}, {})
    if params is None:
        raise ParameterError(
            "multi_head_attention_vjp needs params, a MultiHeadParams; create one with "
            "attnkit.init_multi_head_params(embed_dim, num_heads, rng=...)."
        )
    if params.bias_k is not None or params.bias_v is not None:
        raise ParameterError(
            "multi_head_attention_vjp does not differentiate bias_k/bias_v (add_bias_kv); "
            "drop them from params or differentiate multi_head_attention with PyTorch or JAX."
        )
    self_attention, value_is_key = key is None, value is None
    key = query if key is None else key
    value = key if value is None else value
    shapes = check_inputs(query, key, value, params, num_heads, num_kv_heads, None, False, None,
                          key_name="key" if not self_attention else "query",
                          value_name="value" if not value_is_key else "key")  # fmt: skip
    Hq, Hkv = shapes.num_heads, shapes.num_kv_heads
    S = key.shape[-2]
    check_masks(attn_mask, key_padding_mask, 0, S, query, shapes)
    xp = array_namespace(query, key, value)
    p = params
    q = _heads(xp, _linear(xp, query, p.q_weight, p.q_bias), Hq)  # (..., Hq, L, E)
    k = _heads(xp, _linear(xp, key, p.k_weight, p.k_bias), Hkv)  # (..., Hkv, S, E)
    v = _heads(xp, _linear(xp, value, p.v_weight, p.v_bias), Hkv)  # (..., Hkv, S, Ev)
    mask = combine_masks(xp, attn_mask, key_padding_mask, 0, S)
    out, attention_pullback = attention_vjp(
        q, k, v, mask, dropout_p, is_causal, scale, Hq != Hkv,
        causal_alignment=causal_alignment, window=window, rng=rng, impl=impl,
    )  # fmt: skip
    merged = _merge_heads(xp, out)  # (..., L, Hq*Ev)
    output = _linear(xp, merged, p.out_weight, p.out_bias)  # (..., L, Do)

    def vjp(d_output: Any) -> tuple[Any, Any, Any, MultiHeadParams]:
        """(d_query, d_key, d_value, d_params) for the output's cotangent."""
        if getattr(d_output, "shape", None) is None or tuple(d_output.shape) != tuple(output.shape):
            raise ShapeError(
                f"vjp got d_output {describe(d_output)}, but the output has shape "
                f"{tuple(output.shape)}; pass the loss's gradient with respect to the output."
            )
        d_out_w, d_out_b = _linear_weight_grads(xp, d_output, merged, p.out_bias is not None)
        d_merged = d_output @ p.out_weight  # (..., L, Hq*Ev)
        grads = attention_pullback(_heads(xp, d_merged, Hq))  # (dq, dk, dv[, d_mask])
        d_lin = [_merge_heads(xp, g) for g in grads[:3]]  # (..., N, H*E) each
        d_q_w, d_q_b = _linear_weight_grads(xp, d_lin[0], query, p.q_bias is not None)
        d_k_w, d_k_b = _linear_weight_grads(xp, d_lin[1], key, p.k_bias is not None)
        d_v_w, d_v_b = _linear_weight_grads(xp, d_lin[2], value, p.v_bias is not None)
        d_query = d_lin[0] @ p.q_weight  # (..., L, Dq)
        d_key = d_lin[1] @ p.k_weight  # (..., S, Dk)
        d_value = d_lin[2] @ p.v_weight  # (..., S, Dv)
        if value_is_key:
            d_key, d_value = d_key + d_value, None
        if self_attention:
            d_query, d_key = d_query + d_key, None
        d_params = MultiHeadParams(d_q_w, d_k_w, d_v_w, d_out_w, d_q_b, d_k_b, d_v_b, d_out_b)
        return d_query, d_key, d_value, d_params

    return output, vjp


def _linear_weight_grads(xp: Any, dy: Any, x: Any, bias: bool) -> tuple[Any, Any]:
    """(dW, db) of ``y = x @ W.T + b`` for dy (..., N, out), x (..., N, in): dW (out, in)
    summed over the leading dims and N, db (out,) or None."""
    dy2 = xp.reshape(dy, (-1, dy.shape[-1]))  # (M, out)
    x2 = xp.reshape(xp.broadcast_to(x, (*dy.shape[:-1], x.shape[-1])), (-1, x.shape[-1]))
    dw = xp.matrix_transpose(dy2) @ x2  # (out, in)
    return dw, (xp.sum(dy2, axis=0) if bias else None)
