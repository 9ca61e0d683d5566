"""Gradients of a checked function against the oracle's analytic ones in float64.

The gradients of ``sum(out * grad_out)`` with respect to query, key and value, by the
function's library's autodiff, against :func:`attnkit.testing.oracle.attention_grad` of
the same call, within the tolerance table. Conventions that replace rows after the
softmax (empty rows as the mean or NaN) and ``softcap`` are skipped with the reason.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from . import arrays, oracle
from .compare import compare
from .expect import oracle_call
from .problem import Problem
from .tolerances import exact_allowed, score_bound

__all__ = ["AUTODIFF", "check_gradients", "fold_heads"]

#: The libraries whose autodiff the kit drives, and the module that does it.
AUTODIFF = {"torch": "arrays_torch", "jax": "arrays_jax"}


def fold_heads(grad: np.ndarray, groups: int, mapping: str) -> np.ndarray:
    """(..., Hq, S, X) -> (..., Hq / groups, S, X): sum each key/value head's readers."""
    if groups == 1:
        return grad
    hq = grad.shape[-3]
    if mapping == "grouped":  # head h read h // G
        return grad.reshape(*grad.shape[:-3], hq // groups, groups, *grad.shape[-2:]).sum(-3)
    return grad.reshape(*grad.shape[:-3], groups, hq // groups, *grad.shape[-2:]).sum(-4)


def _reason(p: Problem, conv: Mapping[str, str]) -> str:
    """Why the oracle cannot give this case's gradients ("" when it can)."""
    if "softcap" in p.kwargs:
        return "the oracle's analytic gradients do not cover softcap"
    if p.dtype not in ("float32", "float64"):
        return "gradients are checked in float32 and float64"
    if p.poison is not None:
        return "NaN in the inputs"
    if conv["empty_rows"] != "zero" or conv["empty_rows_additive"] != "zero":
        return "the declared empty-row convention replaces rows after the softmax"
    return ""


def check_gradients(
    fn: Callable[..., Any],
    qkv: list[Any],
    kwargs: dict[str, Any],
    p: Problem,
    conv: Mapping[str, str],
    seed: int,
) -> tuple[str, tuple[str, ...]]:
    """(status, lines): "passed", "differs" (what differs) or "skipped" (why)."""
    reason = _reason(p, conv)
    library = arrays.library_of(qkv[0])
    if library not in AUTODIFF:
        reason = reason or f"{library} has no automatic differentiation"
    if reason:
        return "skipped", (reason,)
    c = oracle_call(p, conv)
    out = oracle.attention(c.query, c.key, c.value, attn_mask=c.attn_mask, **c.kwargs).out
    grad_out = np.random.default_rng(seed).standard_normal(out.shape)
    gold = oracle.attention_grad(
        c.query, c.key, c.value, grad_out, attn_mask=c.attn_mask, **c.kwargs
    )
    gold = (
        gold[0],
        fold_heads(gold[1], c.groups[0], conv["gqa_mapping"]),
        fold_heads(gold[2], c.groups[1], conv["gqa_mapping"]),
    )
    helper = importlib.import_module(f"{__package__}.{AUTODIFF[library]}")
    try:
        got = helper.vjp(fn, qkv, kwargs, grad_out)
    except Exception as exc:  # the function's backward failing is a finding
        return "differs", (f"its gradients raised {type(exc).__name__}: {exc}"[:300],)
    tolerance = "float32" if conv["float64_precision"] == "float32" else p.dtype
    bound = score_bound(c.query, c.key, c.kwargs.get("scale"), c.attn_mask)
    scale = max(1.0, float(np.max(np.abs(grad_out), initial=0.0)))
    lines = []
    for name, g, want in zip(("dquery", "dkey", "dvalue"), got, gold, strict=True):
        if g is None:
            lines.append(f"{name}: no gradient reached the input")
            continue
        if g.shape != want.shape:
            lines.append(f"{name}: shape {g.shape}, expected {want.shape}")
            continue
        allowed = exact_allowed(tolerance, bound, want) * scale
        cmp = compare(g, want, allowed)
        if not cmp.ok:
            lines.append(cmp.words(name))
    return ("differs" if lines else "passed"), tuple(lines)
