"""The oracle's gradients (analytic, float64) and its merge of attention over disjoint
key sets by log-sum-exp."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .forward import _forward, _identity, _masked_matmul, _prepare

__all__ = ["attention_grad", "merge"]


def _sum_to(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum a broadcast gradient back to ``shape`` (undo NumPy broadcasting)."""
    grad = grad.sum(axis=tuple(range(grad.ndim - len(shape))))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    return grad.sum(axis=axes, keepdims=True).reshape(shape)


def attention_grad(
    query: Any, key: Any, value: Any, grad_out: Any, **kwargs: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Analytic gradients of ``sum(out * grad_out)`` w.r.t. query, key, value.

    Takes the keyword arguments of :func:`attention`. grad_out broadcasts to
    out (..., Hq, L, Ev). Returns dq, dk, dv with the shapes of query, key and
    value (broadcast dims and GQA head groups summed). Masked positions and
    empty rows contribute exactly 0.
    """
    p = _prepare(query, key, value, **kwargs)
    res, probs = _forward(p, _identity)  # probs P (*batch, L, S)
    allowed_t = np.swapaxes(p.allowed, -1, -2)  # (*batch, S, L)
    d_out = np.broadcast_to(np.asarray(grad_out, dtype=np.float64), res.out.shape)
    with np.errstate(invalid="ignore", over="ignore"):
        # out = (P * D) @ V, with D the dropout factor.
        dv = _masked_matmul(np.swapaxes(res.weights, -1, -2), d_out, allowed_t)
        dp = np.where(p.allowed, d_out @ np.swapaxes(p.v, -1, -2), 0.0) * p.drop
        ds = probs * (dp - np.sum(dp * probs, axis=-1, keepdims=True))  # (*b, L, S)
        dq = p.scale * _masked_matmul(ds, p.k, p.allowed)  # (*batch, L, E)
        dk = p.scale * _masked_matmul(np.swapaxes(ds, -1, -2), p.q, allowed_t)

    def fold(grad: np.ndarray) -> np.ndarray:
        """(..., Hq, S, X) -> (..., Hkv, S, X): sum the G heads per kv head."""
        if p.groups == 1:
            return grad
        hkv = grad.shape[-3] // p.groups
        grouped = grad.reshape(*grad.shape[:-3], hkv, p.groups, *grad.shape[-2:])
        return grouped.sum(axis=-3)  # (..., Hkv, S, X)

    q_shape, k_shape, v_shape = p.shapes
    return _sum_to(dq, q_shape), _sum_to(fold(dk), k_shape), _sum_to(fold(dv), v_shape)


def merge(outs: Sequence[Any], lses: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Combine attention over disjoint key sets.

    outs: pieces (..., L, Ev); lses: pieces (..., L). Returns out (..., L, Ev)
    and lse (..., L). A piece with ``lse = -inf`` contributes nothing; a row
    empty in every piece gives out 0 and lse -inf.
    """
    if len(outs) != len(lses) or not outs:
        raise ValueError("merge needs the same, non-zero number of outs and lses")
    o = np.stack(np.broadcast_arrays(*(np.asarray(x, np.float64) for x in outs)))
    lse = np.stack(np.broadcast_arrays(*(np.asarray(x, np.float64) for x in lses)))
    # o (P, ..., L, Ev); lse (P, ..., L)
    with np.errstate(invalid="ignore", divide="ignore"):
        m = lse.max(axis=0)  # (..., L)
        m_safe = np.where(m == -np.inf, 0.0, m)
        w = np.exp(lse - m_safe)  # (P, ..., L); 0 for an empty piece
        total = w.sum(axis=0)  # (..., L)
        coef = np.where(total > 0, w / np.where(total > 0, total, 1.0), 0.0)
        present = (lse > -np.inf)[..., None]  # (P, ..., L, 1)
        out = np.where(present, coef[..., None] * o, 0.0).sum(axis=0)
        return out, m_safe + np.log(total)
