"""The validation of plain calls is reused by signature (attnkit._dispatch): a decoding
loop pays for its checks once, yet every call that differs is still checked in full,
and no array outlives its call."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import attnkit as ak
from attnkit import _dispatch
from attnkit.errors import DTypeError, ParameterError, ShapeError

torch = pytest.importorskip("torch")


def _qkv(L=1, S=16, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(1, 2, L, 8, generator=g, dtype=dtype),
        torch.randn(1, 2, S, 8, generator=g, dtype=dtype),
        torch.randn(1, 2, S, 8, generator=g, dtype=dtype),
    )


def test_reused_validation_gives_the_same_results():
    _dispatch._VALIDATED.clear()
    q, k, v = _qkv()
    first = ak.scaled_dot_product_attention(q, k, v)
    assert len(_dispatch._VALIDATED) == 1
    q2, k2, v2 = _qkv(seed=1)
    second = ak.scaled_dot_product_attention(q2, k2, v2)  # cached signature, new arrays
    expected = torch.nn.functional.scaled_dot_product_attention(q2, k2, v2)
    torch.testing.assert_close(second, expected, rtol=1e-6, atol=1e-6)
    assert not torch.equal(first, second)


def test_calls_that_differ_are_checked_in_full():
    _dispatch._VALIDATED.clear()
    q, k, v = _qkv()
    ak.scaled_dot_product_attention(q, k, v)
    with pytest.raises(DTypeError, match="key"):
        ak.scaled_dot_product_attention(q, k.double(), v)
    with pytest.raises(ShapeError, match="value"):
        ak.scaled_dot_product_attention(q, k, v[..., :5, :])
    with pytest.raises(ParameterError, match="q_offset"):
        ak.scaled_dot_product_attention(q, k, v, q_offset=True)  # == 1, but not an int
    with pytest.raises(ParameterError, match="dropout_p"):
        ak.scaled_dot_product_attention(q, k, v, dropout_p=np.array(0.0))
    with pytest.raises(ParameterError, match="impl"):
        ak.scaled_dot_product_attention(q, k, v, impl="fast")


def test_a_window_of_ints_is_part_of_the_signature(monkeypatch: pytest.MonkeyPatch):
    """A decoding loop with a sliding window is validated once; another window, or a
    value equal to a seen one but of another type (True == 1), is checked in full."""
    _dispatch._VALIDATED.clear()
    q, k, v = (x.double() for x in _qkv(L=3, S=16))
    for window in (1, (4, 0), (None, 2)):
        ak.scaled_dot_product_attention(q, k, v, window=window, causal_alignment="bottom_right")
    assert len(_dispatch._VALIDATED) == 3
    with pytest.raises(ParameterError, match="window"):
        ak.scaled_dot_product_attention(q, k, v, window=True, causal_alignment="bottom_right")
    with pytest.raises(ParameterError, match="window left side"):
        ak.scaled_dot_product_attention(q, k, v, window=(True, 0), causal_alignment="bottom_right")
    from attnkit import attention

    def no_validate(*args, **kw):
        raise AssertionError("a seen signature must not be validated again")

    monkeypatch.setattr(attention, "validate", no_validate)
    q2, k2, v2 = (x.double() for x in _qkv(L=3, S=16, seed=1))
    got = ak.scaled_dot_product_attention(
        q2, k2, v2, window=(4, 0), causal_alignment="bottom_right"
    )
    monkeypatch.undo()
    want = ak.scaled_dot_product_attention(
        q2, k2, v2, window=(4, 0), causal_alignment="bottom_right", impl="reference"
    )
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_gqa_signature_reshapes_new_arrays():
    _dispatch._VALIDATED.clear()
    g = torch.Generator().manual_seed(2)
    for _ in range(2):
        q = torch.randn(1, 4, 3, 8, generator=g, dtype=torch.float64)
        k, v = (torch.randn(1, 2, 5, 8, generator=g, dtype=torch.float64) for _ in range(2))
        out = ak.scaled_dot_product_attention(q, k, v, enable_gqa=True, impl="generic")
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)


def test_cache_keeps_no_arrays_and_stays_bounded():
    _dispatch._VALIDATED.clear()
    q, k, v = _qkv()
    refs = [weakref.ref(x) for x in (q, k, v)]
    ak.scaled_dot_product_attention(q, k, v)
    del q, k, v
    gc.collect()
    assert all(r() is None for r in refs), "the validation cache must not keep arrays alive"
    for S in range(1, 2 * _dispatch._CACHE_MAX):
        ak.scaled_dot_product_attention(*_qkv(S=S))
    assert len(_dispatch._VALIDATED) <= _dispatch._CACHE_MAX


@pytest.fixture
def fresh_plans(monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.setattr(_dispatch, "_PLANS", {})
    _dispatch._VALIDATED.clear()
    return _dispatch._PLANS


@pytest.mark.parametrize(
    "q_shape, kv_shape, kwargs",
    [
        ((1, 8, 1, 64), (1, 8, 1024, 64), {}),  # a decoding step
        ((2, 4, 7, 8), (2, 2, 9, 8), {"enable_gqa": True}),
        ((2, 3, 9, 8), (2, 3, 9, 8), {"is_causal": True}),
        ((2, 3, 9, 8), (2, 3, 9, 8), {"scale": 0.3}),
    ],
)
def test_seen_signature_goes_straight_to_sdpa(
    fresh_plans: dict, monkeypatch: pytest.MonkeyPatch, q_shape, kv_shape, kwargs
):
    """The second call of a signature skips validation (validate is not called) and gives
    what SDPA gives on its own arrays; the first call fills the plan."""
    g = torch.Generator().manual_seed(3)

    def draw():
        q = torch.randn(q_shape, generator=g, dtype=torch.float64)
        return q, *(torch.randn(kv_shape, generator=g, dtype=torch.float64) for _ in range(2))

    first = draw()
    ak.scaled_dot_product_attention(*first, **kwargs)
    assert len(fresh_plans) == 1
    from attnkit import attention

    def no_validate(*args, **kw):
        raise AssertionError("a seen signature must not be validated again")

    monkeypatch.setattr(attention, "validate", no_validate)
    q, k, v = draw()
    out = ak.scaled_dot_product_attention(q, k, v, **kwargs)
    monkeypatch.undo()
    ref = ak.scaled_dot_product_attention(q, k, v, impl="reference", **kwargs)
    err = float((out - ref).abs().max())
    assert err <= 1e-12, f"plan vs reference: {err:.2e} > 1e-12"


def test_plans_only_for_plain_calls(fresh_plans: dict):
    """Structured masks, 1-D masks, windows, weights, lse, block sizes and other impls
    never take a plan, and a call that differs from a planned signature is still checked
    in full."""
    q, k, v = _qkv(L=4, S=6)
    ak.scaled_dot_product_attention(q, k, v, attn_mask=ak.masks.key_padding([6]))
    ak.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(6, dtype=torch.bool))
    ak.scaled_dot_product_attention(q, k, v, window=2)
    ak.scaled_dot_product_attention(q, k, v, return_lse=True)
    ak.scaled_dot_product_attention(q, k, v, block_size=2)
    ak.scaled_dot_product_attention(q, k, v, impl="generic")
    ak.scaled_dot_product_attention(q, k, v, is_causal=True, q_offset=1)  # not SDPA's causal
    assert not fresh_plans
    ak.scaled_dot_product_attention(q, k, v)
    assert len(fresh_plans) == 1
    with pytest.raises(DTypeError, match="key"):
        ak.scaled_dot_product_attention(q, k.double(), v)
    with pytest.raises(ParameterError, match="block_size"):
        ak.scaled_dot_product_attention(q, k, v, block_size=0)


def test_plans_keep_no_arrays_and_stay_bounded(fresh_plans: dict):
    q, k, v = _qkv()
    refs = [weakref.ref(x) for x in (q, k, v)]
    ak.scaled_dot_product_attention(q, k, v)
    ak.scaled_dot_product_attention(q, k, v)
    del q, k, v
    gc.collect()
    assert all(r() is None for r in refs), "the plans must not keep arrays alive"
    for S in range(1, 2 * _dispatch._CACHE_MAX):
        ak.scaled_dot_product_attention(*_qkv(S=S))
    assert 0 < len(fresh_plans) <= _dispatch._CACHE_MAX


def test_plan_calls_sdpa_as_patched(fresh_plans: dict, monkeypatch: pytest.MonkeyPatch):
    """A plan looks SDPA up on every call, so a spy installed after the plan was made
    still sees the calls."""
    q, k, v = _qkv()
    ak.scaled_dot_product_attention(q, k, v)
    seen = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    ak.scaled_dot_product_attention(q, k, v)
    assert len(seen) == 1 and len(fresh_plans) == 1


def test_a_mask_array_signature_is_planned_and_keeps_the_nan_promise(
    fresh_plans: dict, monkeypatch: pytest.MonkeyPatch
):
    """A bool mask array of a seen shape (a padded batch, decoding step after step) goes
    straight to the kernel with its mask; the kernel's own finiteness check still sends
    a NaN at a masked position to the guarded path."""
    from attnkit import attention

    q, k, v = _qkv(L=4, S=6, dtype=torch.float64)
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[:, 4:] = False
    ak.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert len(fresh_plans) == 1

    def no_validate(*args, **kw):
        raise AssertionError("a seen signature must not be validated again")

    monkeypatch.setattr(attention, "validate", no_validate)
    other = torch.rand(4, 6) > 0.3
    other[:, 0] = True
    out = ak.scaled_dot_product_attention(q, k, v, attn_mask=other)
    monkeypatch.undo()
    ref = ak.scaled_dot_product_attention(q, k, v, attn_mask=other, impl="reference")
    assert float((out - ref).abs().max()) <= 1e-12
    poisoned = k.clone()
    poisoned[..., 5, :] = float("nan")  # a key the mask hides from every row
    out = ak.scaled_dot_product_attention(q, poisoned, v, attn_mask=mask)
    assert bool(torch.isfinite(out).all()), "NaN at a masked key leaked through the plan"
    with pytest.raises(ak.ShapeError):
        ak.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(5, 6, dtype=torch.bool))
