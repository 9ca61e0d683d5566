"""Runs of translated blocks (attnkit.blocked.translated_runs): ``find_run`` against a
brute-force scan of every block's key columns. The PyTorch kernel that attends a run is tested in
test_torch_runs.py."""

from __future__ import annotations

import itertools
import random
from types import SimpleNamespace

import pytest

from attnkit import masks
from attnkit.blocked.translated_runs import Run, find_run
from attnkit.masks import Geometry, clip_ranges


def _problem(structure, L, S, q_offset=0, kv_offset=0):
    return SimpleNamespace(structure=structure, geometry=Geometry(L, S, q_offset, kv_offset), L=L)


def _relative(p, b, rows):
    ranges = clip_ranges(p.structure.key_ranges(p.geometry, b * rows, (b + 1) * rows), p.geometry.S)
    return (ranges[0][0] - b * rows, ranges[0][1] - b * rows) if len(ranges) == 1 else None


def _brute_force_run(p, rows):
    """(first block, count) of the longest group of consecutive full blocks with one key
    range at the same relative position (itertools.groupby over every block)."""
    best = (0, 0)
    groups = itertools.groupby(range(p.L // rows), key=lambda b: _relative(p, b, rows))
    for rel, blocks in groups:
        blocks = list(blocks)
        if rel is not None and len(blocks) > best[1]:
            best = (blocks[0], len(blocks))
    return best


def test_window_run_by_hand() -> None:
    p = _problem(masks.sliding_window((128, 128)), 8192, 8192)
    # block 4 (rows 128..159) is the first whose keys [0, 288) are not clipped at 0;
    # block 251 (rows 8032..8063) the last whose keys end at 8192
    assert find_run(p, 32) == Run(q_lo=128, q_hi=8064, k_lo=0, rows=32, width=288)


@pytest.mark.parametrize("seed", range(60))
def test_find_run_matches_brute_force(seed: int) -> None:
    r = random.Random(seed)
    L, S = r.randint(1, 700), r.randint(1, 700)
    left, right = r.choice([None, *range(0, 90)]), r.choice([None, *range(0, 90)])
    structure = masks.sliding_window((left, right), r.choice(["top_left", "bottom_right"]))
    if r.random() < 0.3:  # a combination that stays translation invariant
        other = masks.sliding_window((r.randint(0, 30), r.randint(0, 30)))
        structure = structure & other if r.random() < 0.5 else structure | other
    p = _problem(structure, L, S, r.randint(0, 50), r.randint(0, 50))
    rows = r.choice([1, 8, 32])
    run = find_run(p, rows)
    start, count = _brute_force_run(p, rows)
    if count < 2:
        assert run is None, (run, start, count)
        return
    assert run is not None, (start, count)
    assert (run.q_lo, run.blocks) == (start * rows, count)
    for b in range(start, start + count):  # every block reads its slice of the run's keys
        rel = _relative(p, b, rows)
        assert (b * rows + rel[0], rel[1] - rel[0]) == (run.k_lo + (b - start) * rows, run.width)


@pytest.mark.parametrize(
    "structure, L",
    [
        (None, 4096),
        (masks.causal(), 4096),  # every block reads a longer prefix: no two alike
        (masks.documents([100, 200, 300]), 600),  # not translation invariant
        (masks.sliding_window((8, 8)) | masks.global_tokens(2), 600),
        (masks.sliding_window((8, 8)), 40),  # fewer than two blocks of 32
    ],
)
def test_no_run(structure, L: int) -> None:
    assert find_run(_problem(structure, L, L), 32) is None
