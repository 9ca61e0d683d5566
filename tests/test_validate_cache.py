"""The validation of plain calls is reused by signature (attnkit._validate): a decoding
loop pays for its checks once, yet every call that differs is still checked in full,
and no array outlives its call."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import attnkit as ak
from attnkit import _validate
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
    _validate._VALIDATED.clear()
    q, k, v = _qkv()
    first = ak.scaled_dot_product_attention(q, k, v)
    assert len(_validate._VALIDATED) == 1
    q2, k2, v2 = _qkv(seed=1)
    second = ak.scaled_dot_product_attention(q2, k2, v2)  # cached signature, new arrays
    expected = torch.nn.functional.scaled_dot_product_attention(q2, k2, v2)
    torch.testing.assert_close(second, expected, rtol=1e-6, atol=1e-6)
    assert not torch.equal(first, second)


def test_calls_that_differ_are_checked_in_full():
    _validate._VALIDATED.clear()
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


def test_gqa_signature_reshapes_new_arrays():
    _validate._VALIDATED.clear()
    g = torch.Generator().manual_seed(2)
    for _ in range(2):
        q = torch.randn(1, 4, 3, 8, generator=g, dtype=torch.float64)
        k, v = (torch.randn(1, 2, 5, 8, generator=g, dtype=torch.float64) for _ in range(2))
        out = ak.scaled_dot_product_attention(q, k, v, enable_gqa=True, impl="generic")
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)


def test_cache_keeps_no_arrays_and_stays_bounded():
    _validate._VALIDATED.clear()
    q, k, v = _qkv()
    refs = [weakref.ref(x) for x in (q, k, v)]
    ak.scaled_dot_product_attention(q, k, v)
    del q, k, v
    gc.collect()
    assert all(r() is None for r in refs), "the validation cache must not keep arrays alive"
    for S in range(1, 2 * _validate._VALIDATED_MAX):
        ak.scaled_dot_product_attention(*_qkv(S=S))
    assert len(_validate._VALIDATED) <= _validate._VALIDATED_MAX
