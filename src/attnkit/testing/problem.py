"""One call as float64 NumPy data: the inputs exactly as the function receives them.

:func:`draw` makes a case's inputs in a dtype (standard normal from the case's seed,
rounded to the dtype, the mask drawn, NaN written where no query may attend);
:func:`from_call` makes one from a caller's arrays.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from . import arrays
from .cases import Case, MaskSpec
from .oracle import round_to

__all__ = ["CALL_KEYWORDS", "Problem", "draw", "from_call", "in_polarity"]

#: The keyword arguments a checked call may carry (attnkit's names; ``softcap=c`` caps the
#: scaled scores s as c * tanh(s / c), attnkit's ``score_mods.softcap(c)``).
CALL_KEYWORDS = (
    "attn_mask",
    "is_causal",
    "scale",
    "enable_gqa",
    "causal_alignment",
    "window",
    "q_offset",
    "kv_offset",
    "softcap",
)


@dataclass(frozen=True)
class Problem:
    """float64 inputs (values exact in ``dtype``) and the call's keyword arguments.

    query (B, Hq, L, E), key (B, Hkv, S, E), value (B, Hkv, S, Ev); ``attn_mask`` bool
    or float64 additive, broadcastable to (B, Hq, L, S), or None; ``kwargs`` the other
    keyword arguments (attnkit's names); ``poison`` "key" or "value" when NaN was written
    into rows no query may attend."""

    query: np.ndarray
    key: np.ndarray
    value: np.ndarray
    attn_mask: np.ndarray | None
    kwargs: dict[str, Any]
    dtype: str
    poison: str | None = None

    def call_kwargs(self) -> dict[str, Any]:
        """Every keyword argument of the call, ``attn_mask`` included when there is one."""
        extra = {} if self.attn_mask is None else {"attn_mask": self.attn_mask}
        return {**extra, **self.kwargs}


def _mask(spec: MaskSpec, rng: np.random.Generator, dtype: str) -> np.ndarray:
    allowed = rng.random(spec.shape) < spec.keep
    if spec.empty_rows:
        allowed[..., list(spec.empty_rows), :] = False
    if spec.dead_cols:
        allowed[..., list(spec.dead_cols)] = False
    if spec.kind == "bool":
        return allowed
    bias = rng.standard_normal(spec.shape) if spec.bias else np.zeros(spec.shape)
    return round_to(np.where(allowed, bias, -np.inf), dtype)


def draw(case: Case, dtype: str) -> Problem:
    """The case's inputs in ``dtype`` (as float64 values), its mask and its poison."""
    rng = np.random.default_rng(case.seed)
    q, k, v = (rng.standard_normal(s) * case.magnitude for s in (case.q, case.k, case.v))
    q, k, v = (round_to(x, dtype) for x in (q, k, v))
    mask = None if case.mask is None else _mask(case.mask, rng, dtype)
    if case.poison is not None:
        dead = list(case.mask.dead_cols) if case.mask is not None else []
        target = k if case.poison == "key" else v
        target[..., dead, :] = np.nan
    return Problem(q, k, v, mask, dict(case.kwargs), dtype, case.poison)


def from_call(query: Any, key: Any, value: Any, call: dict[str, Any], dtype: str) -> Problem:
    """A problem from arrays of any library (converted to float64 NumPy) and a call's
    keyword arguments (``attn_mask`` among them, or not)."""
    kwargs = dict(call)
    mask = kwargs.pop("attn_mask", None)
    if mask is not None:
        mask = arrays.to_float64(mask, keep_bool=True)
    q, k, v = (arrays.to_float64(x) for x in (query, key, value))
    return Problem(q, k, v, mask, kwargs, dtype)


def in_polarity(p: Problem, conventions: Mapping[str, str]) -> Problem:
    """``p`` as a function that takes True to mean masked is given it: a bool mask
    inverted, so that the same keys stay masked (the expectation inverts it back)."""
    m = p.attn_mask
    if m is None or m.dtype != np.bool_ or conventions["mask_polarity"] != "true_masks":
        return p
    return replace(p, attn_mask=~m)
