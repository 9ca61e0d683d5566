"""The kit's conformance cases, as data: what :func:`attnkit.testing.check_attention` runs.

Every case is one call on query (B, Hq, L, E), key (B, Hkv, S, E), value (B, Hkv, S, Ev):
the shapes, the keyword arguments, a mask to draw (:class:`MaskSpec`), NaN to write where
no query may attend (``poison``), and whether the inputs are non-contiguous views. A
function that does not support a case's arguments skips it, with that reason;
``dtypes="all"`` cases run in every dtype declared, the others in the widest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["CASES", "Case", "MaskSpec"]


@dataclass(frozen=True)
class MaskSpec:
    """How to draw an ``attn_mask``: ``kind`` "bool" (True = may attend) or "additive"
    (0 / -inf, plus a random finite bias where ``bias``), of ``shape`` (broadcastable to
    (B, Hq, L, S)); True with probability ``keep``; ``empty_rows`` (indices along L)
    masked entirely; ``dead_cols`` (indices along S) masked for every query."""

    kind: str = "bool"
    shape: tuple[int, ...] = ()
    keep: float = 0.7
    bias: bool = False
    empty_rows: tuple[int, ...] = ()
    dead_cols: tuple[int, ...] = ()


@dataclass(frozen=True)
class Case:
    """One call: shapes, keyword arguments (attnkit's names), a mask, poison, layout."""

    name: str
    q: tuple[int, ...]
    k: tuple[int, ...]
    v: tuple[int, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    mask: MaskSpec | None = None
    magnitude: float = 1.0  # inputs are standard normal times this
    seed: int = 0
    poison: str | None = None  # "key" or "value": NaN in the rows of dead_cols
    layout: str = "contiguous"  # or "transposed": non-contiguous views
    dtypes: str = "widest"  # or "all"
    grad: bool = False
    probes: tuple[str, ...] = ()

    @property
    def needs(self) -> frozenset[str]:
        """The keyword arguments the call passes."""
        return frozenset(self.kwargs) | ({"attn_mask"} if self.mask is not None else set())

    def describe(self) -> str:
        """The call in words, e.g. ``q (2, 2, 5, 8), k (2, 2, 7, 8), v (2, 2, 7, 8),
        is_causal=True, attn_mask bool (5, 7)``."""
        parts = [f"q {self.q}, k {self.k}, v {self.v}"]
        parts += [f"{k}={v!r}" for k, v in self.kwargs.items()]
        if self.mask is not None:
            parts.append(f"attn_mask {self.mask.kind} {self.mask.shape}")
        if self.poison:
            parts.append(f"NaN in masked {self.poison} rows")
        if self.layout != "contiguous":
            parts.append(f"{self.layout} views")
        return ", ".join(parts)


def _c(name: str, q, k, v, **kw: Any) -> Case:
    return Case(name, tuple(q), tuple(k), tuple(v), **kw)


B, H, L, S, E = 2, 2, 5, 7, 8
Q, K = (B, H, L, E), (B, H, S, E)
SQ = (B, H, S, E)  # L = S

CASES: tuple[Case, ...] = (
    # --- shapes -------------------------------------------------------------------------
    _c("basic", Q, K, K, dtypes="all", grad=True, probes=("default_scale",)),
    _c("square", SQ, SQ, SQ),
    _c("value_features", Q, K, (B, H, S, 3), probes=("default_scale",)),
    _c("decode_L1", (B, H, 1, E), (B, H, 9, E), (B, H, 9, E)),
    _c("L_gt_S", (B, H, 9, E), (B, H, 4, E), (B, H, 4, E)),
    _c("one_key", (1, H, 4, E), (1, H, 1, E), (1, H, 1, E)),
    _c("odd_sizes", (1, 3, 11, 21), (1, 3, 13, 21), (1, 3, 13, 21)),
    _c("one_feature", (1, 1, 6, 1), (1, 1, 6, 1), (1, 1, 6, 1)),
    _c("zero_queries", (1, H, 0, E), (1, H, S, E), (1, H, S, E)),
    _c("zero_keys", (1, H, 4, E), (1, H, 0, E), (1, H, 0, E), probes=("empty_rows",)),
    _c("non_contiguous", Q, K, K, layout="transposed"),
    _c("large_logits", Q, K, K, magnitude=30.0, dtypes="all", seed=3),
    # --- scale ---------------------------------------------------------------------------
    _c("scale", Q, K, K, kwargs={"scale": 0.37}),
    _c("scale_negative", Q, K, K, kwargs={"scale": -0.6}),
    # --- masks ---------------------------------------------------------------------------
    _c(
        "mask_bool",
        Q,
        K,
        K,
        mask=MaskSpec("bool", (L, S)),
        dtypes="all",
        grad=True,
        probes=("mask_polarity",),
    ),
    _c("mask_bool_per_head", Q, K, K, mask=MaskSpec("bool", (B, H, L, S)), seed=1),
    _c(
        "key_padding",
        Q,
        K,
        K,
        mask=MaskSpec("bool", (B, 1, 1, S), keep=1.0, dead_cols=(5, 6)),
        probes=("mask_polarity",),
    ),
    _c(
        "mask_additive",
        Q,
        K,
        K,
        mask=MaskSpec("additive", (B, 1, L, S), bias=True),
        dtypes="all",
        grad=True,
    ),
    _c(
        "mask_bool_empty_rows",
        Q,
        K,
        K,
        mask=MaskSpec("bool", (L, S), empty_rows=(1, 3)),
        grad=True,
        probes=("empty_rows",),
    ),
    _c(
        "mask_additive_empty_rows",
        Q,
        K,
        K,
        mask=MaskSpec("additive", (L, S), empty_rows=(0, 4)),
        probes=("empty_rows_additive",),
    ),
    # --- causal --------------------------------------------------------------------------
    _c("causal_square", SQ, SQ, SQ, kwargs={"is_causal": True}, dtypes="all", grad=True),
    _c(
        "causal_L_lt_S",
        (B, H, 4, E),
        (B, H, 7, E),
        (B, H, 7, E),
        kwargs={"is_causal": True},
        probes=("causal_alignment",),
    ),
    _c(
        "causal_L_gt_S",
        (B, H, 7, E),
        (B, H, 4, E),
        (B, H, 4, E),
        kwargs={"is_causal": True},
        probes=("causal_alignment",),
    ),
    _c(
        "causal_bottom_right",
        (B, H, 4, E),
        (B, H, 7, E),
        (B, H, 7, E),
        kwargs={"is_causal": True, "causal_alignment": "bottom_right"},
    ),
    _c(
        "causal_bottom_right_L_gt_S",
        (B, H, 7, E),
        (B, H, 4, E),
        (B, H, 4, E),
        kwargs={"is_causal": True, "causal_alignment": "bottom_right"},
        probes=("empty_rows",),
    ),
    _c(
        "causal_and_mask",
        SQ,
        SQ,
        SQ,
        kwargs={"is_causal": True},
        mask=MaskSpec("bool", (B, 1, S, S), keep=0.8),
    ),
    # --- windows -------------------------------------------------------------------------
    _c(
        "window",
        (B, H, 9, E),
        (B, H, 9, E),
        (B, H, 9, E),
        kwargs={"window": (2, 1)},
        probes=("window_bounds",),
    ),
    _c(
        "window_causal",
        (B, H, 9, E),
        (B, H, 9, E),
        (B, H, 9, E),
        kwargs={"window": (3, 0)},
        probes=("window_bounds",),
    ),
    _c(
        "window_int",
        (B, H, 9, E),
        (B, H, 9, E),
        (B, H, 9, E),
        kwargs={"window": 2},
        probes=("window_int",),
    ),
    _c("window_L_ne_S", (B, H, 5, E), (B, H, 9, E), (B, H, 9, E), kwargs={"window": (1, 2)}),
    _c(
        "window_one_side",
        (B, H, 8, E),
        (B, H, 8, E),
        (B, H, 8, E),
        kwargs={"window": (None, 1)},
    ),
    _c(
        "offsets",
        (B, H, 4, E),
        (B, H, 6, E),
        (B, H, 6, E),
        kwargs={"is_causal": True, "q_offset": 5, "kv_offset": 2},
    ),
    # --- grouped-query attention -----------------------------------------------------------
    _c(
        "gqa",
        (B, 4, L, E),
        (B, 2, S, E),
        (B, 2, S, E),
        kwargs={"enable_gqa": True},
        dtypes="all",
        grad=True,
        probes=("gqa_mapping",),
    ),
    _c("mqa", (B, 3, L, E), (B, 1, S, E), (B, 1, S, E), kwargs={"enable_gqa": True}),
    # --- soft-capping ----------------------------------------------------------------------
    _c("softcap", Q, K, K, kwargs={"softcap": 2.0}, magnitude=2.0, probes=("softcap",)),
    _c(
        "softcap_and_scale",
        Q,
        K,
        K,
        kwargs={"softcap": 1.5, "scale": 0.8},
        magnitude=2.0,
        seed=2,
        probes=("softcap",),
    ),
    # --- NaN at positions no query may attend --------------------------------------------
    _c(
        "nan_in_masked_key",
        Q,
        K,
        K,
        mask=MaskSpec("bool", (B, 1, 1, S), keep=1.0, dead_cols=(2, 6)),
        poison="key",
        probes=("masked_key_nonfinite",),
    ),
    _c(
        "nan_in_masked_value",
        Q,
        K,
        K,
        mask=MaskSpec("bool", (B, 1, 1, S), keep=1.0, dead_cols=(2, 6)),
        poison="value",
        probes=("masked_value_nonfinite",),
    ),
)
