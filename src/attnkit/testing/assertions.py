"""``assert_attention_close``: one result of any attention implementation against the
float64 oracle, in the manner of ``torch.testing.assert_close``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ParameterError
from . import arrays, oracle
from .compare import Comparison, compare
from .conventions import check_declared
from .detect import explain
from .expect import expect, oracle_call
from .frameworks import describe
from .gradients import fold_heads
from .problem import CALL_KEYWORDS, Problem, from_call
from .tolerances import exact_allowed, score_bound

__all__ = ["AttentionMismatch", "assert_attention_close"]


class AttentionMismatch(AssertionError):
    """A result differs from the oracle; the message says where, by how much and why."""


def _dtype(actual: Any, query: Any, dtype: str | None) -> str:
    name = dtype or arrays.dtype_name(actual if arrays.library_of(actual) else query)
    if name not in arrays.DTYPES:
        raise ParameterError(
            f"assert_attention_close compares floating-point results ({', '.join(arrays.DTYPES)}),"
            f" got {name}; pass dtype= to name the precision the result was computed in."
        )
    return name


def _custom(allowed: float, gold: np.ndarray, atol: float | None, rtol: float | None) -> float:
    if atol is None and rtol is None:
        return allowed
    magnitude = float(np.max(np.abs(gold[np.isfinite(gold)]), initial=0.0))
    return (atol or 0.0) + (rtol or 0.0) * magnitude


def assert_attention_close(
    actual: Any,
    query: Any,
    key: Any,
    value: Any,
    *,
    weights: Any = None,
    lse: Any = None,
    grads: Sequence[Any] | None = None,
    grad_out: Any = None,
    conventions: Mapping[str, str] | None = None,
    dtype: str | None = None,
    atol: float | None = None,
    rtol: float | None = None,
    **call: Any,
) -> None:
    """Assert that ``actual`` is attention of ``query``, ``key``, ``value`` under ``call``.

    ``actual`` (..., Hq, L, Ev), the inputs (..., Hq, L, E), (..., Hkv, S, E),
    (..., Hkv, S, Ev): arrays of any library (NumPy, PyTorch, JAX, ...). ``call``: the
    call's keyword arguments in attnkit's names (``attn_mask``, ``is_causal``, ``scale``,
    ``enable_gqa``, ``causal_alignment``, ``window``, ``q_offset``, ``kv_offset``,
    ``softcap``). ``weights`` (..., Hq, L, S), ``lse`` (..., Hq, L) and ``grads`` (dq,
    dk, dv of ``sum(out * grad_out)``) are compared too when given. The tolerance is the
    table's for the result's dtype (``dtype`` to override; ``atol``/``rtol`` replace it
    with ``atol + rtol * max|expected|``); ``conventions`` holds the result to other
    variants (outputs only). On failure raises :class:`AttentionMismatch` giving the
    measured and allowed error, how many rows differ and which, and the convention most
    likely behind it.
    """
    unknown = sorted(set(call) - set(CALL_KEYWORDS))
    if unknown:
        raise ParameterError(
            f"assert_attention_close got unknown keyword argument(s) {', '.join(unknown)}; "
            f"the call's are {', '.join(CALL_KEYWORDS)}."
        )
    declared = check_declared(conventions, "conventions")
    name = _dtype(actual, query, dtype)
    p = from_call(query, key, value, call, name)
    e = expect(p, declared)
    context = (
        f"query {tuple(p.query.shape)}, key {tuple(p.key.shape)}, value "
        f"{tuple(p.value.shape)}, {name}"
        + "".join(f", {k}={v!r}" for k, v in p.kwargs.items())
        + (
            f", attn_mask {p.attn_mask.dtype} {p.attn_mask.shape}"
            if p.attn_mask is not None
            else ""
        )
    )
    if arrays.library_of(actual) is None:
        raise AttentionMismatch(f"actual is {arrays.describe(actual)}, not an array ({context})")
    got = arrays.to_float64(actual)
    if got.shape != e.out.shape:
        raise AttentionMismatch(
            f"output: shape {got.shape}, expected {e.out.shape} (..., Hq, L, Ev) ({context})"
        )
    cmp = _custom_compare(got, e.out, e.allowed, e.nan_ok, atol, rtol)
    if not cmp.ok:
        found = explain(p, got, declared)
        words = "; ".join(describe(f) for f in found[0]) if found else "none known"
        raise AttentionMismatch(
            f"{cmp.words('output')}; most likely convention: {words} ({context})"
        )
    failures = _extras(p, declared, weights, lse, grads, grad_out, atol, rtol)
    if failures:
        raise AttentionMismatch("; ".join(failures) + f" ({context})")


def _custom_compare(
    got: np.ndarray,
    gold: np.ndarray,
    allowed: float,
    nan_ok: np.ndarray,
    atol: float | None,
    rtol: float | None,
) -> Comparison:
    return compare(got, gold, _custom(allowed, gold, atol, rtol), nan_ok)


def _extras(
    p: Problem,
    declared: dict[str, str],
    weights: Any,
    lse: Any,
    grads: Sequence[Any] | None,
    grad_out: Any,
    atol: float | None,
    rtol: float | None,
) -> list[str]:
    """The weights, lse and gradients that differ from the oracle's, in words."""
    if weights is None and lse is None and grads is None:
        return []
    c = oracle_call(p, declared)
    gold = oracle.attention(c.query, c.key, c.value, attn_mask=c.attn_mask, **c.kwargs)
    tolerance = "float32" if declared["float64_precision"] == "float32" else p.dtype
    tolerance = tolerance if tolerance in ("float32", "float64") else "float32"
    bound = score_bound(c.query, c.key, c.kwargs.get("scale"), c.attn_mask)
    failures = []
    for what, got, want in (("weights", weights, gold.weights), ("lse", lse, gold.lse)):
        if got is None:
            continue
        got = arrays.to_float64(got)
        if what == "lse":  # compare (..., L) as rows of one entry
            got, want = got[..., None], want[..., None]
        allowed = _custom(exact_allowed(tolerance, bound, want), want, atol, rtol)
        cmp = compare(got, want, allowed) if got.shape == want.shape else None
        if cmp is None:
            failures.append(f"{what}: shape {got.shape}, expected {want.shape}")
        elif not cmp.ok:
            failures.append(cmp.words(what))
    if grads is not None:
        if grad_out is None:
            raise ParameterError("grads= needs grad_out=, the cotangent they were taken with.")
        dout = np.broadcast_to(arrays.to_float64(grad_out), gold.out.shape)
        want = oracle.attention_grad(
            c.query, c.key, c.value, dout, attn_mask=c.attn_mask, **c.kwargs
        )
        mapping = declared["gqa_mapping"]
        want = (
            want[0],
            fold_heads(want[1], c.groups[0], mapping),
            fold_heads(want[2], c.groups[1], mapping),
        )
        scale = max(1.0, float(np.max(np.abs(dout), initial=0.0)))
        for what, g, w in zip(("dquery", "dkey", "dvalue"), grads, want, strict=True):
            g = arrays.to_float64(g)
            allowed = _custom(exact_allowed(tolerance, bound, w) * scale, w, atol, rtol)
            if g.shape != w.shape:
                failures.append(f"{what}: shape {g.shape}, expected {w.shape}")
            elif not (cmp := compare(g, w, allowed)).ok:
                failures.append(cmp.words(what))
    return failures
