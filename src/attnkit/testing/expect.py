"""What a call must give under a set of conventions: the float64 oracle's answer, changed
as each convention says, and the error the tolerance table allows around it.

With attnkit's conventions the expectation is exactly
:func:`attnkit.testing.oracle.attention` of the call; each other variant changes the call
or the answer as :mod:`attnkit.testing.conventions` words it. ``ignore`` drops keyword
arguments from the call.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import oracle
from .conventions import WINDOW_SHIFTS
from .problem import Problem
from .tolerances import RHO_OUT, exact_allowed, lowp_allowed, score_bound

__all__ = ["Call", "Expected", "expect", "oracle_call"]


@dataclass(frozen=True)
class Expected:
    """out (..., Hq, L, Ev) float64 (NaN where a convention says NaN); ``allowed`` the
    largest error allowed; ``nan_ok`` (..., Hq, L) rows that may be NaN; ``empty`` rows
    with no allowed key; ``tolerance`` the dtype whose tolerance applies."""

    out: np.ndarray
    allowed: float
    nan_ok: np.ndarray
    empty: np.ndarray
    tolerance: str


@dataclass(frozen=True)
class Call:
    """The oracle's call under the conventions: inputs, mask and keyword arguments, and
    the bool (L, S) position rule with the bool user mask (for telling empty rows)."""

    query: np.ndarray
    key: np.ndarray
    value: np.ndarray
    attn_mask: np.ndarray | None
    kwargs: dict[str, Any]
    structure: np.ndarray  # bool, broadcastable to (..., Hq, L, S): positions & bool mask
    groups: tuple[int, int]  # key and value heads repeated (or tiled) this many times


def _sides(window: Any, int_variant: str) -> tuple[int | None, int | None]:
    if isinstance(window, int):
        return (window, window) if int_variant == "pair" else (window // 2, window // 2)
    return window[0], window[1]


def _positions(L: int, S: int, kw: dict[str, Any], conv: Mapping[str, str]) -> np.ndarray:
    """bool (L, S): the causal and window rules with the window's sides as the conventions
    move them (a side may become negative: then the query itself is outside)."""
    shift = S - L if kw.get("causal_alignment") == "bottom_right" else 0
    qpos = kw.get("q_offset", 0) + shift + np.arange(L)[:, None]  # (L, 1)
    kpos = kw.get("kv_offset", 0) + np.arange(S)[None, :]  # (1, S)
    allowed = np.ones((L, S), dtype=bool)
    if kw.get("is_causal"):
        allowed &= kpos <= qpos
    if kw.get("window") is not None:
        left, right = _sides(kw["window"], conv["window_int"])
        dl, dr = WINDOW_SHIFTS[conv["window_bounds"]]
        if left is not None:
            allowed &= kpos >= qpos - (left + dl)
        if right is not None:
            allowed &= kpos <= qpos + (right + dr)
    return allowed


def _softcap(cap: float, variant: str, scale: float) -> Callable[..., Any] | None:
    if variant == "tanh":
        return lambda s, *_: cap * np.tanh(s / cap)
    if variant == "tanh_before_scale":
        if scale == 0:
            return lambda s, *_: s
        return lambda s, *_: scale * cap * np.tanh(s / scale / cap)
    if variant == "rational":
        return lambda s, *_: s / (1.0 + np.abs(s) / cap)
    return None  # ignored


def _heads(x: np.ndarray, hq: int, mapping: str) -> tuple[np.ndarray, int]:
    """key or value (..., H, S, X) with its heads repeated to Hq (grouped: head h reads
    h // G; interleaved: h % H); unchanged when it already has Hq heads."""
    h = x.shape[-3]
    if h == hq or hq % h:
        return x, 1
    g = hq // h
    if mapping == "grouped":
        return np.repeat(x, g, axis=-3), g  # (..., Hq, S, X)
    return np.concatenate([x] * g, axis=-3), g  # (..., Hq, S, X)


def oracle_call(p: Problem, conv: Mapping[str, str], ignore: frozenset[str] = frozenset()) -> Call:
    """The oracle's call that gives the expectation of ``p`` under ``conv``."""
    kw = {k: v for k, v in p.kwargs.items() if k not in ignore}
    mask = None if "attn_mask" in ignore else p.attn_mask
    q, k, v = p.query, p.key, p.value
    L, S = q.shape[-2], k.shape[-2]
    if (kw.get("is_causal") or kw.get("window") is not None) and "causal_alignment" not in kw:
        kw["causal_alignment"] = conv["causal_alignment"]
    if mask is not None and mask.dtype == np.bool_ and conv["mask_polarity"] == "true_masks":
        mask = ~mask
    if kw.get("scale") is None:
        E, Ev = q.shape[-1], v.shape[-1]
        default = conv["default_scale"]
        scales = {"inv_sqrt_e": None, "inv_sqrt_ev": 1 / math.sqrt(max(Ev, 1)), "inv_e": 1 / E}
        kw["scale"] = scales.get(default, 1.0)
    cap = kw.pop("softcap", None)
    if cap is not None:
        scale = kw["scale"] if kw["scale"] is not None else 1 / math.sqrt(q.shape[-1])
        kw["score_mod"] = _softcap(float(cap), conv["softcap"], float(scale))
    groups = (1, 1)
    if kw.pop("enable_gqa", False) and q.ndim >= 3:
        k, gk = _heads(k, q.shape[-3], conv["gqa_mapping"])
        v, gv = _heads(v, q.shape[-3], conv["gqa_mapping"])
        groups = (gk, gv)
    positions = _positions(L, S, kw, conv)  # (L, S)
    moved = conv["window_bounds"] != "inclusive" or conv["window_int"] != "pair"
    if moved and kw.get("window") is not None:  # the moved window, as a mask
        for name in ("is_causal", "window", "q_offset", "kv_offset", "causal_alignment"):
            kw.pop(name, None)
        if mask is None:
            mask = positions
        elif mask.dtype == np.bool_:
            mask = mask & positions
        else:
            mask = np.where(positions, mask, -np.inf)
    structure = positions if mask is None or mask.dtype != np.bool_ else positions & mask
    return Call(q, k, v, mask, kw, structure, groups)


def _empty_rows(out: np.ndarray, rows: np.ndarray, value: np.ndarray, variant: str) -> None:
    if variant == "zero" or not rows.any():
        return
    if variant == "nan":
        out[rows] = np.nan
        return
    S = value.shape[-2]
    with np.errstate(invalid="ignore"):
        mean = value.sum(axis=-2, keepdims=True) / max(S, 1)  # (..., H, 1, Ev)
    out[rows] = np.broadcast_to(mean, out.shape)[rows]


def expect(p: Problem, conv: Mapping[str, str], ignore: frozenset[str] = frozenset()) -> Expected:
    """The expectation of ``p`` under the conventions ``conv`` (every name of
    :data:`~attnkit.testing.conventions.CONVENTIONS`), without the keyword arguments in
    ``ignore``."""
    c = oracle_call(p, conv, ignore)
    res = oracle.attention(c.query, c.key, c.value, attn_mask=c.attn_mask, **c.kwargs)
    out = res.out.copy()  # (..., Hq, L, Ev)
    empty = np.isneginf(res.lse)  # (..., Hq, L)
    by_structure = ~np.broadcast_to(c.structure, res.allowed.shape).any(axis=-1)
    _empty_rows(out, empty & by_structure, c.value, conv["empty_rows"])
    _empty_rows(out, empty & ~by_structure, c.value, conv["empty_rows_additive"])
    leaks = {"key": conv["masked_key_nonfinite"], "value": conv["masked_value_nonfinite"]}
    nan_ok = np.full(empty.shape, leaks.get(p.poison or "", "ignored") == "leaks")
    tolerance = p.dtype
    if p.dtype == "float64" and conv["float64_precision"] == "float32":
        tolerance = "float32"
    bound = score_bound(c.query, c.key, c.kwargs.get("scale"), c.attn_mask)
    if tolerance in ("float32", "float64"):
        allowed = exact_allowed(tolerance, bound, out)
    else:
        low = oracle.attention_lowp(
            c.query, c.key, c.value, p.dtype, attn_mask=c.attn_mask, **c.kwargs
        ).out
        with np.errstate(invalid="ignore"):
            gap = np.abs(low - res.out)
        baseline = float(np.max(gap[np.isfinite(gap)], initial=0.0))
        allowed = lowp_allowed(p.dtype, baseline, out, RHO_OUT)
    return Expected(out, allowed, nan_ok, empty, tolerance)
