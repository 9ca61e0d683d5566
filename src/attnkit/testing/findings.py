"""One result of a framework named in the kit's words: what ``attnkit verify`` says where a
framework differs from the oracle, from the reports' detectors and table.

:func:`name_difference` takes a call, the framework's output and its key in the
frameworks table, and returns the conventions behind the difference, their words, and
whether the table says that framework follows them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .conventions import DEFAULTS
from .detect import explain
from .frameworks import FRAMEWORKS, describe
from .oracle import round_to
from .problem import Problem

__all__ = ["Named", "name_difference"]


@dataclass(frozen=True)
class Named:
    """``kind`` "empty rows", "precision" or "differs"; ``conventions`` the findings'
    keys (``"empty_rows=mean"``); ``words`` them in words (the detector's first
    explanation), "" when nothing known explains the difference; ``declared`` whether
    the frameworks table gives the framework exactly these conventions."""

    kind: str
    conventions: tuple[str, ...]
    words: str
    declared: bool


def name_difference(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any,
    kwargs: dict[str, Any],
    dtype: str,
    theirs: Any,
    framework: str,
) -> Named:
    """Why ``theirs`` (float64, the output's shape) differs from the oracle's answer to
    the call in ``dtype``, for the framework ``framework`` (a key of the table)."""
    mask = None
    if attn_mask is not None:
        mask = np.asarray(attn_mask)
        mask = mask if mask.dtype == np.bool_ else round_to(mask, dtype)
    q, k, v = (round_to(x, dtype) for x in (query, key, value))
    p = Problem(q, k, v, mask, dict(kwargs), dtype)
    found = explain(p, np.asarray(theirs, dtype=np.float64), DEFAULTS)
    if not found:
        return Named("differs", (), "", False)
    group = found[0]
    keys = tuple(f.key for f in group)
    names = {f.convention for f in group}
    if names & {"empty_rows", "empty_rows_additive"}:
        kind = "empty rows"
    elif names == {"float64_precision"}:
        kind = "precision"
    else:
        kind = "differs"
    follows = next((f.follows() for f in FRAMEWORKS if f.key == framework), DEFAULTS)
    declared = all(f.convention and follows[f.convention] == f.variant for f in group)
    return Named(kind, keys, "; ".join(describe(f) for f in group), declared)
