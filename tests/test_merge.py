"""merge_partials: attention over disjoint key pieces merges exactly into the whole.

Keys are split into 2 to 4 contiguous pieces; each piece is computed with
``scaled_dot_product_attention(..., return_lse=True, kv_offset=start)`` so causal
structure stays right, and the merge must equal the single call over all keys in float64
(1e-12), with rows that are empty in some pieces and in every piece. JAX runs in float64.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from _helpers import x64

import attnkit as ak

sdpa = ak.scaled_dot_product_attention
TOL = 1e-12
B, H, L, S, E, EV = 2, 3, 9, 13, 5, 4


def randn(seed: int, *shape: int) -> np.ndarray:
    """Fresh random normal float64 data (never zeros)."""
    return np.random.default_rng(seed).standard_normal(shape)


@dataclass
class Backend:
    name: str
    asarray: Callable[[np.ndarray], Any]
    to_numpy: Callable[[Any], np.ndarray]


@pytest.fixture(params=["numpy", "torch", "jax"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "numpy":
        yield Backend("numpy", np.asarray, np.asarray)
    elif request.param == "torch":
        torch = pytest.importorskip("torch")
        yield Backend("torch", torch.from_numpy, lambda x: x.detach().cpu().numpy())
    else:
        jax = pytest.importorskip("jax")
        with x64(jax):
            yield Backend("jax", jax.numpy.asarray, np.asarray)


def cuts_for(n: int) -> list[int]:
    """n contiguous, disjoint, non-empty pieces of range(S), of unequal sizes."""
    return {2: [0, 5, S], 3: [0, 4, 9, S], 4: [0, 2, 6, 7, S]}[n]


def test_cuts() -> None:
    for n in (2, 3, 4):
        cuts = cuts_for(n)
        assert len(cuts) == n + 1 and cuts[0] == 0 and cuts[-1] == S
        assert all(a < b for a, b in itertools.pairwise(cuts))


def bool_mask() -> np.ndarray:
    """(B, 1, L, S) random bool mask with rows empty in every piece and in some pieces."""
    mask = np.random.default_rng(100).random((B, 1, L, S)) > 0.5
    mask[0, 0, 2] = False  # empty everywhere
    mask[1, 0, 7] = False  # empty everywhere
    mask[1, 0, 4] = False
    mask[1, 0, 4, S - 1] = True  # one key, in the last piece only
    mask[0, 0, 6] = False
    mask[0, 0, 6, 0] = True  # one key, in the first piece only
    return mask


CASES = {
    # name: attention kwargs; "mask" picks a bool or additive attn_mask
    "causal_top_left": dict(is_causal=True),
    "causal_bottom_right": dict(is_causal=True, causal_alignment="bottom_right"),
    "causal_bottom_right_L_gt_S": dict(is_causal=True, causal_alignment="bottom_right"),
    "bool_mask": dict(mask="bool"),
    "additive_mask": dict(mask="additive"),
    "bool_mask_causal_window": dict(mask="bool", is_causal=True, window=(3, None)),
}


def make_case(name: str) -> tuple[dict[str, np.ndarray], dict[str, Any], int, int]:
    kwargs = dict(CASES[name])
    q_len, k_len = L, S
    if name == "causal_bottom_right_L_gt_S":
        q_len, k_len = 17, S  # rows 0..3 see no key at all
    data = {
        "query": randn(1, B, H, q_len, E),
        "key": randn(2, B, H, k_len, E),
        "value": randn(3, B, H, k_len, EV),
    }
    kind = kwargs.pop("mask", None)
    if kind is not None:
        mask = bool_mask()
        if kind == "additive":
            mask = np.where(mask, randn(4, *mask.shape), -np.inf)
        data["attn_mask"] = mask
    return data, kwargs, q_len, k_len


def piece_kwargs(kwargs: dict[str, Any], q_len: int, k_len: int, start: int) -> dict[str, Any]:
    """Attention kwargs for the keys starting at ``start``: same absolute positions."""
    kw = dict(kwargs, kv_offset=start)
    if kw.pop("causal_alignment", "top_left") == "bottom_right":
        kw["q_offset"] = k_len - q_len  # bottom_right over the whole S, not the piece's
    return kw


def whole_and_pieces(
    b: Backend, name: str, n: int
) -> tuple[tuple[np.ndarray, np.ndarray], list[Any], list[Any], int]:
    data, kwargs, q_len, k_len = make_case(name)
    arrays = {k: b.asarray(v) for k, v in data.items()}
    whole = sdpa(**arrays, **kwargs, return_lse=True)
    outs, lses = [], []
    cuts = cuts_for(n)
    for lo, hi in itertools.pairwise(cuts):
        piece = {
            "query": arrays["query"],
            "key": b.asarray(data["key"][..., lo:hi, :]),
            "value": b.asarray(data["value"][..., lo:hi, :]),
        }
        if "attn_mask" in data:
            piece["attn_mask"] = b.asarray(data["attn_mask"][..., lo:hi])
        out, lse = sdpa(**piece, **piece_kwargs(kwargs, q_len, k_len, lo), return_lse=True)
        outs.append(out)
        lses.append(lse)
    return (b.to_numpy(whole.output), b.to_numpy(whole.lse)), outs, lses, q_len


def assert_close(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
    assert not np.isnan(actual).any(), f"{what}: NaN in {np.argwhere(np.isnan(actual))[:5]}"
    finite = np.isfinite(expected)
    assert np.array_equal(np.isfinite(actual), finite), f"{what}: infinities differ"
    assert np.array_equal(actual[~finite], expected[~finite]), f"{what}: infinities differ"
    err = np.abs(actual[finite] - expected[finite]).max(initial=0.0)
    assert err <= TOL, f"{what}: max error {err:.3g}, allowed {TOL:g}, shape {actual.shape}"


# JAX compiles every new shape on first use (seconds per case on CPU), so it runs a subset
# that still covers offsets, both kinds of empty rows and the additive mask.
JAX_CASES = [("bool_mask", 3), ("additive_mask", 3), ("causal_bottom_right_L_gt_S", 3)]
MATRIX = [
    pytest.param(b, name, n, id=f"{b}-{name}-{n}")
    for b in ("numpy", "torch", "jax")
    for name in CASES
    for n in (2, 3, 4)
    if b != "jax" or (name, n) in JAX_CASES
]


@pytest.mark.parametrize(("backend", "name", "n"), MATRIX, indirect=["backend"])
def test_merged_equals_whole(backend: Backend, name: str, n: int) -> None:
    (out, lse), outs, lses, _ = whole_and_pieces(backend, name, n)
    merged_out, merged_lse = ak.merge_partials(outs, lses)
    assert_close(backend.to_numpy(merged_out), out, f"{name} out, {n} pieces")
    merged_lse = backend.to_numpy(merged_lse)
    assert_close(merged_lse, lse, f"{name} lse, {n} pieces")
    assert np.array_equal(np.isneginf(merged_lse), np.isneginf(lse))
    assert not np.isposinf(merged_lse).any()


@pytest.mark.parametrize("name", ["bool_mask", "additive_mask", "causal_bottom_right_L_gt_S"])
def test_empty_rows_exist_and_merge_to_zero(name: str) -> None:
    b = Backend("numpy", np.asarray, np.asarray)
    n = 3
    (_, lse), outs, lses, _ = whole_and_pieces(b, name, n)
    piece_empty = np.stack([np.isneginf(x) for x in lses])  # (P, B, H, L)
    everywhere = piece_empty.all(0)
    somewhere = piece_empty.any(0) & ~everywhere
    assert everywhere.any(), "the data must have rows empty in every piece"
    assert np.array_equal(everywhere, np.isneginf(lse))
    if name != "causal_bottom_right_L_gt_S":
        assert somewhere.any(), "the data must have rows empty in some pieces only"
    merged_out, merged_lse = ak.merge_partials(outs, lses)
    assert np.array_equal(merged_out[everywhere], np.zeros_like(merged_out[everywhere]))
    assert np.isneginf(merged_lse[everywhere]).all()
    assert np.isfinite(merged_lse[somewhere]).all()
    assert (np.abs(merged_out[~everywhere]).sum(-1) > 0).all()


def test_bottom_right_causal_has_empty_rows() -> None:
    data, kwargs, q_len, k_len = make_case("causal_bottom_right_L_gt_S")
    out, lse = sdpa(**data, **kwargs, return_lse=True)
    empty = np.isneginf(lse)
    assert empty[..., : q_len - k_len].all() and not empty[..., q_len - k_len :].any()
    assert np.array_equal(out[empty], np.zeros_like(out[empty]))


def test_nan_on_empty_rows_does_not_leak(backend: Backend) -> None:
    """A piece whose row is empty (lse -inf) may hold NaN there, as other kernels give."""
    (out, lse), outs, lses, _ = whole_and_pieces(backend, "bool_mask", 3)
    poisoned = []
    for piece, piece_lse in zip(outs, lses, strict=True):
        o = backend.to_numpy(piece).copy()
        empty = np.isneginf(backend.to_numpy(piece_lse))
        assert empty.any()
        o[empty] = np.nan
        poisoned.append(backend.asarray(o))
    merged_out, merged_lse = ak.merge_partials(poisoned, lses)
    assert_close(backend.to_numpy(merged_out), out, "out with NaN in empty pieces")
    assert_close(backend.to_numpy(merged_lse), lse, "lse with NaN in empty pieces")


# numpy warns on 0 * inf inside merge_partials' guarded product; the result is still exact.
@pytest.mark.filterwarnings("ignore:invalid value encountered in multiply:RuntimeWarning")
def test_inf_on_empty_rows_does_not_leak() -> None:
    (out, _), outs, lses, _ = whole_and_pieces(
        Backend("numpy", np.asarray, np.asarray), "bool_mask", 2
    )
    poisoned = [
        np.where(np.isneginf(x)[..., None], np.inf, o) for o, x in zip(outs, lses, strict=True)
    ]
    merged_out, _ = ak.merge_partials(poisoned, lses)
    assert_close(merged_out, out, "out with inf in empty pieces")


def test_single_piece_is_identity(backend: Backend) -> None:
    (out, lse), _, _, _ = whole_and_pieces(backend, "bool_mask", 3)
    merged_out, merged_lse = ak.merge_partials([backend.asarray(out)], [backend.asarray(lse)])
    assert_close(backend.to_numpy(merged_out), out, "one piece out")
    assert_close(backend.to_numpy(merged_lse), lse, "one piece lse")


def test_order_of_pieces_does_not_matter() -> None:
    b = Backend("numpy", np.asarray, np.asarray)
    (out, lse), outs, lses, _ = whole_and_pieces(b, "causal_top_left", 4)
    order = [2, 0, 3, 1]
    merged_out, merged_lse = ak.merge_partials([outs[i] for i in order], [lses[i] for i in order])
    assert_close(merged_out, out, "permuted out")
    assert_close(merged_lse, lse, "permuted lse")


def test_tuples_accepted_and_inputs_untouched() -> None:
    b = Backend("numpy", np.asarray, np.asarray)
    (out, _), outs, lses, _ = whole_and_pieces(b, "bool_mask", 3)
    for x in (*outs, *lses):
        x.setflags(write=False)  # a write into a caller's array would raise
    before = [x.copy() for x in (*outs, *lses)]
    merged_out, _ = ak.merge_partials(tuple(outs), tuple(lses))
    assert_close(merged_out, out, "tuple input")
    for x, y in zip((*outs, *lses), before, strict=True):
        assert np.array_equal(x, y, equal_nan=True)


def test_jax_jit_merge() -> None:
    jax = pytest.importorskip("jax")
    with x64(jax):
        b = Backend("jax", jax.numpy.asarray, np.asarray)
        (out, lse), outs, lses, _ = whole_and_pieces(b, "bool_mask", 3)
        merged_out, merged_lse = jax.jit(ak.merge_partials)(outs, lses)
        assert_close(np.asarray(merged_out), out, "jit out")
        assert_close(np.asarray(merged_lse), lse, "jit lse")


def test_float32_pieces() -> None:
    torch = pytest.importorskip("torch")
    b = Backend("torch", torch.from_numpy, lambda x: x.numpy())
    (out, lse), outs, lses, _ = whole_and_pieces(b, "bool_mask", 4)
    merged_out, merged_lse = ak.merge_partials([o.float() for o in outs], [x.float() for x in lses])
    assert merged_out.dtype == torch.float32 and merged_lse.dtype == torch.float32
    finite = np.isfinite(lse)
    assert np.array_equal(np.isneginf(merged_lse.numpy()), ~finite)
    assert np.abs(merged_out.double().numpy() - out).max() < 1e-5
    assert np.abs(merged_lse.double().numpy()[finite] - lse[finite]).max() < 1e-5
