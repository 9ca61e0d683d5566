"""attnkit.testing's translators, both ways, every round trip, and each against what the
other library itself does with the translated value where that library is installed:
FlashAttention's ``window_size`` (data only: FlashAttention needs a GPU), jax.nn's
``local_window_size`` and ``key_value_seq_lengths``, Hugging Face's ``sliding_window``
(transformers' own mask functions), FlexAttention's ``mask_mod`` and ``BlockMask``.
Every allowed relation is compared with the float64 oracle's (:func:`allowed_mask`).
"""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import numpy as np
import pytest

import attnkit as ak
from attnkit import masks
from attnkit.errors import ParameterError
from attnkit.testing import adapters
from attnkit.testing import oracle as ref
from attnkit.testing import translate as tr
from attnkit.testing.run import Unsupported

WINDOWS: list[Any] = [0, 3, (2, 1), (0, 0), (None, 1), (4, None), (None, None), (5, 0)]


@pytest.mark.parametrize("window", WINDOWS, ids=str)
def test_flash_window_size_round_trip(window: Any) -> None:
    size = tr.to_flash_window_size(window)
    assert all(isinstance(s, int) and s >= -1 for s in size)
    back = tr.from_flash_window_size(size)
    left, right = masks.window_sides(window)
    assert back == (None if (left, right) == (None, None) else (left, right))
    assert tr.to_flash_window_size(back) == size  # and the other way


def test_flash_window_size_values_and_errors() -> None:
    assert tr.to_flash_window_size(None) == (-1, -1)
    assert tr.to_flash_window_size((None, 0)) == (-1, 0)  # FlashAttention's causal window
    assert tr.from_flash_window_size((3, -1)) == (3, None)
    with pytest.raises(ParameterError, match="ints >= -1"):
        tr.from_flash_window_size((-2, 0))
    with pytest.raises(ParameterError, match="a pair"):
        tr.from_flash_window_size(3)  # type: ignore[arg-type]


@pytest.mark.parametrize("window", [w for w in WINDOWS if None not in np.atleast_1d(w)], ids=str)
def test_jax_local_window_size_round_trip(window: Any) -> None:
    size = tr.to_jax_local_window_size(window)
    assert tr.from_jax_local_window_size(size) == size == masks.window_sides(window)
    assert tr.from_jax_local_window_size(size[0]) == (size[0], size[0])


def test_jax_local_window_size_refuses_unbounded_sides() -> None:
    with pytest.raises(ParameterError, match="unbounded side"):
        tr.to_jax_local_window_size((None, 2))


@pytest.mark.parametrize(("L", "S"), [(7, 7), (4, 9), (9, 4)])
@pytest.mark.parametrize("window", [(2, 1), (0, 3), 1])
def test_jax_nn_local_window_size_means_attnkits_window(L: int, S: int, window: Any) -> None:
    """What jax.nn computes with the translated local_window_size is attnkit's window."""
    jax = pytest.importorskip("jax")
    rng = np.random.default_rng(L * S)
    q, k, v = (rng.standard_normal((1, n, 2, 4)).astype(np.float32) for n in (L, S, S))
    out = jax.nn.dot_product_attention(
        q, k, v, local_window_size=tr.to_jax_local_window_size(window)
    )  # (B, T, N, H)
    gold = ref.attention(*(np.swapaxes(x, 1, 2) for x in (q, k, v)), window=window)
    rows = np.isfinite(gold.lse)  # rows with keys (the others: jax.nn's empty-row convention)
    assert rows.any()
    got = np.swapaxes(np.asarray(out), 1, 2)  # (B, N, T, H)
    np.testing.assert_allclose(got[rows], gold.out[rows], atol=2e-6)


def test_jax_key_value_seq_lengths_round_trip() -> None:
    lengths = [5, 0, 7]
    mask = tr.from_jax_key_value_seq_lengths(np.array(lengths))
    assert np.array_equal(tr.to_jax_key_value_seq_lengths(mask, 7), lengths)
    dense = np.asarray(mask.materialize(np, 1, 7))  # (3, 1, 1, 7)
    assert np.array_equal(tr.to_jax_key_value_seq_lengths(dense, 7), lengths)
    with pytest.raises(ParameterError, match="not key padding"):
        tr.to_jax_key_value_seq_lengths(dense[..., ::-1], 7)
    with pytest.raises(ParameterError, match=r"key-padding mask \(B, 1, 1, S\)"):
        tr.to_jax_key_value_seq_lengths(np.ones((7,), bool), 7)


def test_jax_nn_key_value_seq_lengths_means_attnkits_key_padding() -> None:
    jax = pytest.importorskip("jax")
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, n, 2, 4)).astype(np.float32) for n in (5, 6, 6))
    mask = masks.key_padding([4, 6])
    lengths = tr.to_jax_key_value_seq_lengths(mask, 6)
    out = jax.nn.dot_product_attention(q, k, v, key_value_seq_lengths=lengths)
    qh, kh, vh = (np.swapaxes(x, 1, 2) for x in (q, k, v))
    want = ak.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask)
    np.testing.assert_allclose(np.swapaxes(np.asarray(out), 1, 2), want, atol=2e-6)


@pytest.mark.parametrize("W", [1, 2, 4, 9])
def test_hf_sliding_window_round_trip_and_transformers_masks(W: int) -> None:
    window = tr.from_hf_sliding_window(W)
    assert window == (W - 1, 0) and tr.to_hf_sliding_window(window) == W
    masking = pytest.importorskip("transformers.masking_utils")
    overlay = masking.sliding_window_overlay(W)
    L = 8
    hf = np.array(
        [
            [
                bool(masking.causal_mask_function(0, 0, i, j) and overlay(0, 0, i, j))
                for j in range(L)
            ]
            for i in range(L)
        ]
    )
    ours = ref.allowed_mask(L, L, window=window)
    assert np.array_equal(hf, ours)
    assert np.array_equal(hf, ref.allowed_mask(L, L, is_causal=True, window=window))


def test_hf_sliding_window_errors() -> None:
    with pytest.raises(ParameterError, match=r"window=\(W - 1, 0\)"):
        tr.to_hf_sliding_window((2, 1))
    with pytest.raises(ParameterError, match="must be >= 1"):
        tr.from_hf_sliding_window(0)


# --- FlexAttention (PyTorch) ------------------------------------------------------------

CALLS = [
    {"is_causal": True},
    {"is_causal": True, "causal_alignment": "bottom_right"},
    {"window": (2, 1)},
    {"window": (None, 0), "q_offset": 3, "kv_offset": 1},
    {"window": 1, "causal_alignment": "bottom_right"},
]


@pytest.fixture(scope="module")
def flex() -> Any:
    pytest.importorskip("torch")
    from attnkit.testing import translate_torch

    return translate_torch


@pytest.mark.parametrize("call", CALLS, ids=str)
@pytest.mark.parametrize(("L", "S"), [(5, 5), (3, 8), (8, 3)])
def test_mask_mod_round_trip(flex: Any, call: dict[str, Any], L: int, S: int) -> None:
    """attnkit's call -> mask_mod -> attnkit's dense mask equals the oracle's relation,
    and that mask -> mask_mod -> dense again is the same."""
    mask_mod = flex.to_mask_mod(L=L, S=S, **call)
    dense = flex.from_mask_mod(mask_mod, 1, 1, L, S)
    want = ref.allowed_mask(L, S, **call)
    assert np.array_equal(np.asarray(dense.materialize(np, L, S))[0, 0], want)
    again = flex.to_mask_mod(dense, L=L, S=S, B=1, H=1)
    assert np.array_equal(
        np.asarray(flex.from_mask_mod(again, 1, 1, L, S).materialize(np, L, S)),
        np.asarray(dense.materialize(np, L, S)),
    )


def test_block_mask_round_trip_and_flex_attention(flex: Any) -> None:
    """A BlockMask made from attnkit's call, read back; flex_attention with it equals
    attnkit's attention with the same call (bool masks and structured masks alike)."""
    import torch

    B, H, L, S = 2, 2, 6, 9
    rng = np.random.default_rng(2)
    keep = rng.random((B, 1, L, S)) < 0.6
    call = {"window": (3, 1), "causal_alignment": "bottom_right"}
    block_mask = flex.to_block_mask(B, H, L, S, attn_mask=torch.from_numpy(keep), **call)
    back = np.asarray(flex.from_block_mask(block_mask).materialize(np, L, S))  # (B, H, L, S)
    assert np.array_equal(back, np.broadcast_to(keep & ref.allowed_mask(L, S, **call), back.shape))
    assert flex.to_block_mask(B, H, L, S) is None  # nothing masked
    q, k, v = (torch.from_numpy(rng.standard_normal((B, H, n, 4))) for n in (L, S, S))
    from torch.nn.attention.flex_attention import flex_attention

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "flex_attention called without torch.compile()"
        out = flex_attention(q, k, v, block_mask=block_mask)
    want = ak.scaled_dot_product_attention(q, k, v, attn_mask=torch.from_numpy(keep), **call)
    torch.testing.assert_close(out, want, atol=1e-12, rtol=0)
    # an attnkit structured mask goes the same way
    m = masks.sliding_window((2, 0)) & masks.key_padding([9, 5])
    dense = np.asarray(
        flex.from_mask_mod(flex.to_mask_mod(m, L=L, S=S, B=B, H=H), B, H, L, S).materialize(
            np, L, S
        )
    )
    assert np.array_equal(dense, np.broadcast_to(np.asarray(m.materialize(np, L, S)), dense.shape))


# --- the adapters built on them ---------------------------------------------------------


def test_window_size_adapter_checks_a_flash_style_kernel() -> None:
    """A kernel taking FlashAttention's window_size (-1 unbounded), through the adapter."""

    def kernel(q, k, v, window_size=(-1, -1), is_causal=False):
        left, right = (None if s == -1 else s for s in window_size)
        return ak.scaled_dot_product_attention(q, k, v, window=(left, right), is_causal=is_causal)

    from attnkit.testing import check_attention

    adapted = adapters.window_size(kernel)
    assert adapters.declared_options(adapted)["supports"] == {"window", "is_causal"}
    report = check_attention(adapted, examples=5, raise_on_failure=False)
    assert report.ok and any(r.case == "window_one_side" for r in report.passed), str(report)


def test_sliding_window_adapter_skips_what_it_cannot_say() -> None:
    def kernel(q, k, v, sliding_window=None):  # Hugging Face's: keys i-W+1 .. i
        window = None if sliding_window is None else (sliding_window - 1, 0)
        return ak.scaled_dot_product_attention(q, k, v, window=window)

    from attnkit.testing import check_attention

    report = check_attention(adapters.sliding_window(kernel), examples=0, raise_on_failure=False)
    assert report.ok, str(report)
    assert any(r.case == "window_causal" for r in report.passed)  # (3, 0): W = 4
    assert "is not a causal sliding window" in str(report)  # (2, 1): skipped, with why
    with pytest.raises(Unsupported):
        adapters.sliding_window(kernel)(*(np.ones((1, 1, 2, 2)),) * 3, window=(1, 1))


def test_time_first_adapter_layout() -> None:
    """A (B, T, N, H) function through time_first computes (B, N, T, H) attention."""

    def btnh(q, k, v, mask=None, bias=None, local_window_size=None, is_causal=False):
        swap = (0, 2, 1, 3)
        window = None if local_window_size is None else tuple(local_window_size)
        attn_mask = mask if mask is not None else bias
        out = ak.scaled_dot_product_attention(
            *(x.transpose(swap) for x in (q, k, v)),
            attn_mask=attn_mask,
            window=window,
            is_causal=is_causal,
        )
        return out.transpose(swap)

    adapted = adapters.time_first(btnh)
    assert adapters.declared_options(adapted)["supports"] == {
        "attn_mask",
        "window",
        "is_causal",
        "enable_gqa",
    }
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 3, n, 4)) for n in (5, 7, 7))
    for kw in ({"window": (1, 2)}, {"attn_mask": rng.random((5, 7)) < 0.8}, {}):
        np.testing.assert_allclose(
            adapted(q, k, v, **kw), ref.attention(q, k, v, **kw).out, atol=1e-12
        )


def test_flash_window_size_keeps_every_relation() -> None:
    """Every pair of small sides: the FlashAttention translation keeps the relation."""
    for left, right in itertools.product([None, 0, 1, 3], repeat=2):
        size = tr.to_flash_window_size((left, right))
        back = tr.from_flash_window_size(size)
        want = ref.allowed_mask(6, 6, window=(left, right))
        got = ref.allowed_mask(6, 6, window=back) if back is not None else np.ones((6, 6), bool)
        assert np.array_equal(got, want)
