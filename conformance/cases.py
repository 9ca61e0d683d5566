"""The conformance cases, as data.

Each :class:`Case` says which inputs to draw (shapes, dtype, seed, magnitude), which
mask to build (:class:`MaskSpec`), the keyword arguments of the call, and what kind of
check it is (``kind``):

``attention``    out, weights and lse against the float64 reference (every impl).
``merge``        the keys split into ``pieces`` computed separately with ``kv_offset``
                 and merged with ``attnkit.merge_partials``, against the whole.
``dropout``      the drop rate, reproducibility, and out == weights @ value.
``equivalence``  a bool mask and its additive 0/-inf twin give the same result.
``poison``       NaN / 1e10 / inf written into key and value columns that no query may
                 attend leave every output unchanged.

``grad`` marks cases whose gradients are also checked (torch and JAX), ``frameworks``
marks cases where PyTorch's SDPA and ``jax.nn.dot_product_attention`` define the same
thing, so attnkit is compared with them too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["CASES", "Case", "MaskSpec", "by_name"]


@dataclass(frozen=True)
class MaskSpec:
    """How to draw an ``attn_mask``.

    kind: ``"bool"`` (True = may attend), ``"additive"`` (0 / -inf where masked, plus a
    finite random bias where ``bias`` is set). ``shape`` is the mask's own shape; with
    ``expand_to`` it is broadcast (stride 0) to that shape before the call.
    ``empty_rows`` (indices along L) are masked entirely in every head and batch;
    ``dead_cols`` (indices along S) are masked for every query (key padding).
    """

    kind: str = "bool"
    shape: tuple[int, ...] = ()
    keep: float = 0.7
    bias: bool = False
    empty_rows: tuple[int, ...] = ()
    dead_cols: tuple[int, ...] = ()
    expand_to: tuple[int, ...] | None = None
    dtype: str | None = None  # additive masks only: default = the inputs' dtype


@dataclass(frozen=True)
class Case:
    name: str
    q: tuple[int, ...]
    k: tuple[int, ...]
    v: tuple[int, ...]
    dtype: str = "float64"
    kwargs: dict[str, Any] = field(default_factory=dict)
    mask: MaskSpec | None = None
    kind: str = "attention"
    magnitude: float = 1.0  # inputs are standard normal times this
    seed: int = 0
    grad: bool = False
    frameworks: bool = False
    expect_empty_rows: bool = False  # the case must contain a row with nothing to attend
    layout: str = "contiguous"  # or "transposed" (non-contiguous views), "broadcast_kv"
    pieces: tuple[int, ...] = ()  # merge: key split points
    dropout_p: float = 0.0
    golden: bool = False


def _c(name: str, q, k, v, **kw: Any) -> Case:
    return Case(name, tuple(q), tuple(k), tuple(v), **kw)


B, H, L, S, E = 2, 3, 5, 7, 8
Q, K, V = (B, H, L, E), (B, H, S, E), (B, H, S, 6)

CASES: list[Case] = [
    # --- shapes and ranks ------------------------------------------------------------
    _c("basic_4d", Q, K, V, grad=True, frameworks=True, golden=True),
    _c(
        "seed_3d_batch4_len10", (4, 10, 64), (4, 10, 64), (4, 10, 128), frameworks=True, golden=True
    ),
    _c("seed_multihead_walkthrough", (4, 8, 10, 8), (4, 8, 10, 8), (4, 8, 10, 16), frameworks=True),
    _c("rank2_no_heads", (7, 5), (9, 5), (9, 3), grad=True, frameworks=True, golden=True),
    _c("rank3_one_lead", (3, 6, 8), (3, 4, 8), (3, 4, 8), frameworks=True),
    _c(
        "rank5_broadcast_lead",
        (2, 1, 3, 5, 8),
        (1, 2, 3, 6, 8),
        (1, 2, 3, 6, 4),
        grad=True,
        golden=True,
    ),
    _c("lead_broadcast_batch", (3, 1, 5, 8), (1, 2, 6, 8), (1, 2, 6, 8), grad=True),
    _c("mqa_by_broadcast", (2, 4, 5, 8), (2, 1, 6, 8), (2, 1, 6, 8), frameworks=True),
    _c("decode_L1", (1, 2, 1, 16), (1, 2, 33, 16), (1, 2, 33, 16), grad=True, frameworks=True),
    _c("L_gt_S", (1, 2, 13, 8), (1, 2, 5, 8), (1, 2, 5, 8), frameworks=True),
    _c("L1_S1", (1, 1, 1, 4), (1, 1, 1, 4), (1, 1, 1, 4), frameworks=True, golden=True),
    _c("odd_97_head21_59", (1, 1, 97, 21), (1, 1, 97, 21), (1, 1, 97, 59), frameworks=True),
    _c("long_1025_short_keys", (1, 1025, 8), (1, 33, 8), (1, 33, 8)),
    _c("zero_L", (1, 2, 0, 8), (1, 2, 6, 8), (1, 2, 6, 8)),
    _c("zero_S", (1, 2, 4, 8), (1, 2, 0, 8), (1, 2, 0, 5), expect_empty_rows=True, golden=True),
    _c("zero_L_and_S", (2, 0, 8), (2, 0, 8), (2, 0, 8)),
    _c("one_feature", (1, 1, 6, 1), (1, 1, 6, 1), (1, 1, 6, 1)),
    # --- grouped-query attention -------------------------------------------------------
    _c(
        "gqa_4_over_2",
        (2, 4, 5, 8),
        (2, 2, 7, 8),
        (2, 2, 7, 8),
        kwargs={"enable_gqa": True},
        grad=True,
        frameworks=True,
        golden=True,
    ),
    _c(
        "gqa_mqa_6_over_1",
        (1, 6, 5, 8),
        (1, 1, 7, 8),
        (1, 1, 7, 5),
        kwargs={"enable_gqa": True},
        grad=True,
        frameworks=True,
    ),
    _c("gqa_3d_no_batch", (4, 5, 8), (2, 7, 8), (2, 7, 8), kwargs={"enable_gqa": True}),
    _c(
        "gqa_head_mask_causal_br",
        (1, 4, 5, 8),
        (1, 2, 9, 8),
        (1, 2, 9, 8),
        kwargs={"enable_gqa": True, "is_causal": True, "causal_alignment": "bottom_right"},
        mask=MaskSpec("bool", (4, 5, 9)),
        grad=True,
    ),
    _c(
        "gqa_mask_head1",
        (2, 4, 5, 8),
        (2, 2, 7, 8),
        (2, 2, 7, 8),
        kwargs={"enable_gqa": True},
        mask=MaskSpec("bool", (2, 1, 5, 7)),
        frameworks=True,
    ),
    _c("gqa_same_heads_noop", Q, K, V, kwargs={"enable_gqa": True}),
    # --- scale -----------------------------------------------------------------------
    _c("scale_negative", Q, K, V, kwargs={"scale": -0.3}, grad=True, frameworks=True),
    _c("scale_tiny", Q, K, V, kwargs={"scale": 1e-6}, frameworks=True),
    _c("scale_zero_uniform", Q, K, V, kwargs={"scale": 0.0}),
    _c("scale_large", Q, K, V, kwargs={"scale": 3.0}, frameworks=True),
    # --- masks in every broadcast form ---------------------------------------------------
    _c(
        "mask_bool_LS",
        Q,
        K,
        V,
        mask=MaskSpec("bool", (L, S)),
        grad=True,
        frameworks=True,
        golden=True,
    ),
    _c("mask_bool_1S", Q, K, V, mask=MaskSpec("bool", (1, S)), frameworks=True),
    _c("mask_bool_L1", Q, K, V, mask=MaskSpec("bool", (L, 1), keep=0.8), frameworks=True),
    _c("mask_bool_S_rank1", Q, K, V, mask=MaskSpec("bool", (S,))),
    _c("mask_bool_B1LS", Q, K, V, mask=MaskSpec("bool", (B, 1, L, S)), frameworks=True),
    _c("mask_bool_1HLS", Q, K, V, mask=MaskSpec("bool", (1, H, L, S)), frameworks=True),
    _c("mask_bool_BHLS", Q, K, V, mask=MaskSpec("bool", (B, H, L, S)), grad=True, frameworks=True),
    _c(
        "mask_bool_stride0_expanded",
        Q,
        K,
        V,
        mask=MaskSpec("bool", (1, 1, L, S), expand_to=(B, H, L, S)),
        frameworks=True,
    ),
    _c(
        "mask_bool_key_padding",
        Q,
        K,
        V,
        mask=MaskSpec("bool", (B, 1, 1, S), keep=1.0, dead_cols=(5, 6)),
        frameworks=True,
    ),
    _c(
        "mask_additive_LS",
        Q,
        K,
        V,
        mask=MaskSpec("additive", (L, S)),
        grad=True,
        frameworks=True,
        golden=True,
    ),
    _c(
        "mask_additive_bias_B1LS",
        Q,
        K,
        V,
        mask=MaskSpec("additive", (B, 1, L, S), keep=1.0, bias=True),
        grad=True,
        frameworks=True,
    ),
    _c(
        "mask_additive_bias_and_inf",
        Q,
        K,
        V,
        mask=MaskSpec("additive", (1, H, L, S), bias=True),
        frameworks=True,
    ),
    _c(
        "mask_additive_float32_on_f64",
        Q,
        K,
        V,
        mask=MaskSpec("additive", (L, S), bias=True, dtype="float32"),
    ),
    _c(
        "mask_bool_empty_rows",
        Q,
        K,
        V,
        mask=MaskSpec("bool", (L, S), empty_rows=(1, 3)),
        grad=True,
        frameworks=True,
        expect_empty_rows=True,
        golden=True,
    ),
    _c(
        "mask_additive_empty_rows",
        Q,
        K,
        V,
        mask=MaskSpec("additive", (B, H, L, S), empty_rows=(0, 4)),
        grad=True,
        frameworks=True,
        expect_empty_rows=True,
    ),
    _c(
        "mask_bool_all_masked",
        Q,
        K,
        V,
        mask=MaskSpec("bool", (L, S), keep=0.0),
        grad=True,
        expect_empty_rows=True,
    ),
    _c(
        "mask_bool_and_causal",
        Q,
        K,
        V,
        kwargs={"is_causal": True},
        mask=MaskSpec("bool", (L, S), keep=0.8),
        grad=True,
    ),
    _c(
        "mask_bool_and_window",
        (1, 2, 11, 8),
        (1, 2, 11, 8),
        (1, 2, 11, 8),
        kwargs={"window": 2},
        mask=MaskSpec("bool", (11, 11), keep=0.8),
    ),
    # --- causal, both alignments, offsets -------------------------------------------------
    _c(
        "causal_square",
        Q,
        (B, H, L, E),
        (B, H, L, 6),
        kwargs={"is_causal": True},
        grad=True,
        frameworks=True,
        golden=True,
    ),
    _c("causal_L_lt_S_top_left", Q, K, V, kwargs={"is_causal": True}, frameworks=True),
    _c(
        "causal_L_gt_S_top_left",
        (1, 2, 9, 8),
        (1, 2, 4, 8),
        (1, 2, 4, 8),
        kwargs={"is_causal": True},
        frameworks=True,
    ),
    _c(
        "causal_L_lt_S_bottom_right",
        Q,
        K,
        V,
        kwargs={"is_causal": True, "causal_alignment": "bottom_right"},
        grad=True,
        golden=True,
    ),
    _c(
        "causal_L_gt_S_bottom_right",
        (1, 2, 9, 8),
        (1, 2, 4, 8),
        (1, 2, 4, 8),
        kwargs={"is_causal": True, "causal_alignment": "bottom_right"},
        grad=True,
        expect_empty_rows=True,
        golden=True,
    ),
    _c(
        "causal_with_key_padding",
        Q,
        (B, H, L, E),
        (B, H, L, 6),
        kwargs={"is_causal": True},
        mask=MaskSpec("bool", (B, 1, 1, L), keep=1.0, dead_cols=(0,)),
        grad=True,
        expect_empty_rows=True,
    ),
    _c(
        "causal_q_offset_decode",
        (1, 2, 3, 8),
        (1, 2, 10, 8),
        (1, 2, 10, 8),
        kwargs={"is_causal": True, "q_offset": 5},
    ),
    _c(
        "causal_both_offsets",
        (1, 2, 6, 8),
        (1, 2, 8, 8),
        (1, 2, 8, 8),
        kwargs={"is_causal": True, "q_offset": 10, "kv_offset": 7},
        expect_empty_rows=False,
    ),
    _c(
        "causal_offsets_empty_rows",
        (1, 2, 6, 8),
        (1, 2, 8, 8),
        (1, 2, 8, 8),
        kwargs={"is_causal": True, "q_offset": 0, "kv_offset": 3},
        grad=True,
        expect_empty_rows=True,
    ),
    _c(
        "causal_decode_bottom_right_L1",
        (1, 2, 1, 16),
        (1, 2, 33, 16),
        (1, 2, 33, 16),
        kwargs={"is_causal": True, "causal_alignment": "bottom_right"},
    ),
    _c(
        "causal_97_many_blocks",
        (1, 1, 97, 8),
        (1, 1, 97, 8),
        (1, 1, 97, 8),
        kwargs={"is_causal": True},
        frameworks=True,
    ),
    # --- sliding windows --------------------------------------------------------------
    _c(
        "window_int_2",
        (1, 2, 12, 8),
        (1, 2, 12, 8),
        (1, 2, 12, 8),
        kwargs={"window": 2},
        grad=True,
        golden=True,
    ),
    _c("window_causal_3_0", (1, 2, 12, 8), (1, 2, 12, 8), (1, 2, 12, 8), kwargs={"window": (3, 0)}),
    _c("window_0_2", (1, 2, 12, 8), (1, 2, 12, 8), (1, 2, 12, 8), kwargs={"window": (0, 2)}),
    _c(
        "window_left_unbounded",
        (1, 2, 12, 8),
        (1, 2, 12, 8),
        (1, 2, 12, 8),
        kwargs={"window": (None, 1)},
    ),
    _c(
        "window_right_unbounded",
        (1, 2, 12, 8),
        (1, 2, 12, 8),
        (1, 2, 12, 8),
        kwargs={"window": (2, None)},
    ),
    _c("window_diagonal_only", (1, 2, 12, 8), (1, 2, 12, 8), (1, 2, 12, 8), kwargs={"window": 0}),
    _c(
        "window_and_causal_bottom_right",
        (1, 2, 6, 8),
        (1, 2, 15, 8),
        (1, 2, 15, 8),
        kwargs={"window": (4, 4), "is_causal": True, "causal_alignment": "bottom_right"},
        grad=True,
    ),
    _c(
        "window_with_offsets",
        (1, 2, 9, 8),
        (1, 2, 14, 8),
        (1, 2, 14, 8),
        kwargs={"window": (2, 3), "q_offset": 4, "kv_offset": 1},
    ),
    _c(
        "window_out_of_reach",
        (1, 2, 4, 8),
        (1, 2, 7, 8),
        (1, 2, 7, 8),
        kwargs={"window": 2, "q_offset": 20},
        expect_empty_rows=True,
    ),
    _c("window_long_97", (1, 97, 8), (1, 97, 8), (1, 97, 8), kwargs={"window": (7, 3)}),
    # long enough for a run of translated blocks (attnkit.runs: PyTorch attends the
    # window's interior in one call) between the clipped blocks at both ends
    _c(
        "window_run_203",
        (2, 2, 203, 8),
        (2, 2, 203, 8),
        (2, 2, 203, 6),
        kwargs={"window": (20, 9)},
        grad=True,
    ),
    _c(
        "window_run_offsets",
        (1, 2, 190, 8),
        (1, 2, 230, 8),
        (1, 2, 230, 5),
        kwargs={"window": (16, 40), "q_offset": 30, "kv_offset": 5},
        grad=True,
    ),
    _c(
        "window_run_causal_bottom_right",
        (1, 2, 170, 8),
        (1, 2, 200, 8),
        (1, 2, 200, 8),
        kwargs={"window": (40, 10), "is_causal": True, "causal_alignment": "bottom_right"},
    ),
    _c(
        "window_run_float32",
        (1, 4, 301, 16),
        (1, 4, 301, 16),
        (1, 4, 301, 16),
        dtype="float32",
        kwargs={"window": (64, 64)},
    ),
    _c(
        "window_run_transposed",
        (1, 2, 150, 8),
        (1, 2, 150, 8),
        (1, 2, 150, 8),
        kwargs={"window": (12, 12)},
        layout="transposed",
    ),
    # --- numerics and dtypes ---------------------------------------------------------------
    _c("float32_basic", Q, K, V, dtype="float32", frameworks=True),
    _c("float32_logits_1e4", Q, K, V, dtype="float32", magnitude=30.0, frameworks=True),
    _c(
        "float32_logits_1e4_causal_mask",
        Q,
        (B, H, L, E),
        (B, H, L, 6),
        dtype="float32",
        magnitude=30.0,
        kwargs={"is_causal": True},
        mask=MaskSpec("bool", (B, 1, 1, L), keep=1.0, dead_cols=(4,)),
    ),
    _c("float64_logits_1e6", Q, K, V, magnitude=300.0),
    _c(
        "float32_masks_empty_rows",
        Q,
        K,
        V,
        dtype="float32",
        mask=MaskSpec("bool", (B, H, L, S), empty_rows=(2,)),
        expect_empty_rows=True,
        frameworks=True,
    ),
    _c("float16_basic", (1, 2, 16, 16), (1, 2, 24, 16), (1, 2, 24, 16), dtype="float16"),
    _c(
        "float16_empty_rows_causal",
        (1, 2, 9, 16),
        (1, 2, 4, 16),
        (1, 2, 4, 16),
        dtype="float16",
        kwargs={"is_causal": True, "causal_alignment": "bottom_right"},
        expect_empty_rows=True,
    ),
    _c("bfloat16_basic", (1, 2, 16, 16), (1, 2, 24, 16), (1, 2, 24, 16), dtype="bfloat16"),
    _c(
        "bfloat16_large_values",
        (1, 2, 16, 16),
        (1, 2, 24, 16),
        (1, 2, 24, 16),
        dtype="bfloat16",
        magnitude=8.0,
    ),
    _c(
        "bfloat16_masked",
        (1, 2, 16, 16),
        (1, 2, 24, 16),
        (1, 2, 24, 16),
        dtype="bfloat16",
        mask=MaskSpec("bool", (16, 24), empty_rows=(3,)),
        expect_empty_rows=True,
    ),
    # --- layouts ----------------------------------------------------------------------
    _c(
        "noncontiguous_views",
        Q,
        K,
        V,
        layout="transposed",
        mask=MaskSpec("bool", (L, S)),
        frameworks=True,
    ),
    _c("stride0_broadcast_kv", Q, K, V, layout="broadcast_kv", frameworks=True),
    # --- merging pieces ---------------------------------------------------------------
    _c("merge_two_pieces", Q, K, V, kind="merge", pieces=(3,)),
    _c(
        "merge_three_pieces_causal",
        (1, 2, 9, 8),
        (1, 2, 9, 8),
        (1, 2, 9, 8),
        kind="merge",
        pieces=(3, 6),
        kwargs={"is_causal": True},
    ),
    _c(
        "merge_rows_empty_in_some_and_all",
        Q,
        K,
        V,
        kind="merge",
        pieces=(2, 4),
        mask=MaskSpec("bool", (L, S), keep=0.5, empty_rows=(2,)),
        expect_empty_rows=True,
    ),
    _c(
        "merge_uneven_float32_window",
        (1, 2, 10, 8),
        (1, 2, 13, 8),
        (1, 2, 13, 8),
        dtype="float32",
        kind="merge",
        pieces=(1, 5, 12),
        kwargs={"window": (2, 2), "causal_alignment": "bottom_right"},
    ),
    # --- dropout ----------------------------------------------------------------------
    _c(
        "dropout_rate_0.2",
        (1, 2, 96, 8),
        (1, 2, 128, 8),
        (1, 2, 128, 8),
        kind="dropout",
        dropout_p=0.2,
    ),
    _c(
        "dropout_0.5_masked_causal",
        (1, 2, 160, 8),
        (1, 2, 160, 8),
        (1, 2, 160, 8),
        kind="dropout",
        dropout_p=0.5,
        kwargs={"is_causal": True},
        mask=MaskSpec("bool", (160, 160), keep=1.0, empty_rows=(7,)),
    ),
    # --- equivalence and poisoned masked positions --------------------------------------------
    _c(
        "bool_equals_additive",
        Q,
        K,
        V,
        kind="equivalence",
        mask=MaskSpec("bool", (B, H, L, S), empty_rows=(0,)),
    ),
    _c(
        "bool_equals_additive_causal",
        Q,
        (B, H, L, E),
        (B, H, L, 6),
        kind="equivalence",
        kwargs={"is_causal": True},
        mask=MaskSpec("bool", (1, 1, L, L)),
    ),
    _c(
        "poison_nan_padding_bool",
        Q,
        K,
        V,
        kind="poison",
        mask=MaskSpec("bool", (B, 1, 1, S), keep=1.0, dead_cols=(2, 6)),
    ),
    _c(
        "poison_huge_padding_additive",
        Q,
        K,
        V,
        kind="poison",
        mask=MaskSpec("additive", (B, 1, L, S), keep=0.8, dead_cols=(0, 3)),
    ),
    _c(
        "poison_float32_causal_padding",
        Q,
        (B, H, L, E),
        (B, H, L, 6),
        dtype="float32",
        kind="poison",
        kwargs={"is_causal": True},
        mask=MaskSpec("bool", (B, 1, 1, L), keep=1.0, dead_cols=(1,)),
    ),
]

_BY_NAME = {case.name: case for case in CASES}
assert len(_BY_NAME) == len(CASES), "case names must be unique"


def by_name(name: str) -> Case:
    return _BY_NAME[name]
