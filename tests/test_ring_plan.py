"""attnkit.ring.plan: the framework-free planning of ring attention (pieces, the skip
rule, which masks a ring can carry, segment ids split from the positional rest)."""

from __future__ import annotations

import numpy as np
import pytest

import attnkit as ak
from attnkit.ring import plan as ring_plan


def test_shard_pieces_cover_the_sequence_once() -> None:
    for layout in ring_plan.LAYOUTS:
        for parts in (1, 2, 4):
            pieces = ring_plan.shard_pieces(layout, parts, 16 * parts)
            starts = sorted(p.start + i for shard in pieces for p in shard for i in range(p.length))
            assert starts == list(range(16 * parts)), (layout, parts)


def test_carries_arrays() -> None:
    ids = np.random.default_rng().integers(0, 3, (2, 8))
    assert ring_plan.carries_arrays(ak.masks.segments(ids))
    assert ring_plan.carries_arrays(ak.masks.causal() & ak.masks.key_padding(np.array([3, 8])))
    assert ring_plan.carries_arrays(ring_plan.PlacedMask(ak.masks.dense(np.ones((8, 8), bool))))
    assert not ring_plan.carries_arrays(ak.masks.causal() | ak.masks.documents([3, 5]))
    assert not ring_plan.carries_arrays(ak.masks.key_padding([3, 8]))


def test_split_segments() -> None:
    rng = np.random.default_rng()
    ids = rng.integers(0, 3, (2, 8))
    seg, rest = ring_plan.split_segments(ak.masks.segments(ids))
    assert rest is None and seg.lead == (2, 1) and seg.q_ids.shape == (2, 1, 8)
    seg, rest = ring_plan.split_segments(
        ak.masks.causal() & ak.masks.segments(ids) & ak.masks.sliding_window((3, 0))
    )
    assert seg is not None and rest is not None and not ring_plan.carries_arrays(rest)
    # the rest and the pieces' segments rebuild the mask
    L = 8
    whole = ak.masks.causal() & ak.masks.segments(ids) & ak.masks.sliding_window((3, 0))
    rebuilt = seg.piece(seg.q_ids, seg.kv_ids) & rest
    np.testing.assert_array_equal(whole.materialize(np, L, L), rebuilt.materialize(np, L, L))
    for mask in (
        ak.masks.segments(ids) | ak.masks.causal(),
        ak.masks.segments(ids) & ak.masks.key_padding(np.array([3, 8])),
        ak.masks.segments(ids) & ak.masks.segments(ids),
        ak.masks.causal(),
    ):
        seg, rest = ring_plan.split_segments(mask)
        assert seg is None and rest is mask, mask
    assert ring_plan.split_segments(None) == (None, None)


def test_segments_piece_matches_the_slice_of_the_whole_mask() -> None:
    """A pair's segments mask (the two pieces' ids) is the whole mask's block."""
    rng = np.random.default_rng()
    ids = rng.integers(0, 3, (2, 16))
    seg, _ = ring_plan.split_segments(ak.masks.segments(ids))
    whole = ak.masks.segments(ids).materialize(np, 16, 16)  # (2, 1, 16, 16)
    piece = seg.piece(seg.q_ids[..., 4:8], seg.kv_ids[..., 10:16]).materialize(np, 4, 6)
    np.testing.assert_array_equal(piece, whole[..., 4:8, 10:16])


@pytest.mark.parametrize("layout", ring_plan.LAYOUTS)
def test_pair_is_empty_under_causal(layout: str) -> None:
    """A (query piece, key piece) pair is empty exactly when every key is after every
    query (causal), checked against the materialized mask."""
    parts, n = 4, 32
    pieces = ring_plan.shard_pieces(layout, parts, n)
    rule = ring_plan.ring_structure(True, None)
    dense = ak.masks.causal().materialize(np, n, n)
    for qs in pieces:
        for ks in pieces:
            for qp in qs:
                for kp in ks:
                    block = dense[qp.start : qp.start + qp.length, kp.start : kp.start + kp.length]
                    assert ring_plan.pair_is_empty(rule, qp, kp, 0, 0) == (not block.any())
