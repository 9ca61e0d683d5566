"""impl="auto" on PyTorch: which calls go to F.scaled_dot_product_attention, which do not.

Correctness of the fused path is the conformance matrix's job (it runs impl="auto" on
every case); this checks the dispatch itself, so a silent fallback cannot hide.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import attnkit as ak

torch = pytest.importorskip("torch")


@pytest.fixture
def sdpa_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    calls: list[dict] = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    return calls


def _qkv(q_shape, kv_shape, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(torch.from_numpy(rng.standard_normal(s)) for s in (q_shape, kv_shape, kv_shape))


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"is_causal": True},
        {"scale": 0.3},
        {"is_causal": True, "causal_alignment": "bottom_right"},  # L == S: same diagonal
    ],
)
def test_fused_when_semantics_match(sdpa_calls: list, kwargs: dict) -> None:
    q, k, v = _qkv((2, 4, 6, 8), (2, 4, 6, 8))
    out = ak.scaled_dot_product_attention(q, k, v, **kwargs)
    generic = ak.scaled_dot_product_attention(q, k, v, impl="generic", **kwargs)
    assert len(sdpa_calls) == 1
    torch.testing.assert_close(out, generic, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"is_causal": True, "causal_alignment": "bottom_right"},  # a decoding step's row
        {"window": (9, 0), "causal_alignment": "bottom_right"},  # wider than the keys
        {"window": (None, 3), "q_offset": 20},  # every key behind the query
    ],
)
def test_fused_where_the_structure_leaves_no_pair_out(sdpa_calls: list, kwargs: dict) -> None:
    q, k, v = (x.requires_grad_() for x in _qkv((2, 4, 1, 8), (2, 4, 9, 8)))
    out = ak.scaled_dot_product_attention(q, k, v, **kwargs)
    assert len(sdpa_calls) == 1 and not sdpa_calls[0].get("is_causal")
    generic = ak.scaled_dot_product_attention(q, k, v, impl="generic", **kwargs)
    torch.testing.assert_close(out, generic, rtol=1e-12, atol=1e-12)
    grad = torch.randn_like(out)
    fused = torch.autograd.grad(out, (q, k, v), grad)
    expected = torch.autograd.grad(generic, (q, k, v), grad)
    for got, want in zip(fused, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_fused_with_mask_and_gqa(sdpa_calls: list) -> None:
    q, _, _ = _qkv((2, 4, 6, 8), (2, 2, 7, 8))
    _, k, v = _qkv((2, 4, 6, 8), (2, 2, 7, 8), seed=1)
    mask = torch.rand(2, 1, 6, 7, generator=torch.Generator().manual_seed(0)) > 0.3
    mask[..., 2, :] = False  # a fully masked row
    out = ak.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    assert len(sdpa_calls) == 1 and sdpa_calls[0]["enable_gqa"] is True
    assert torch.all(out[..., 2, :] == 0)
    generic = ak.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, enable_gqa=True, impl="generic"
    )
    torch.testing.assert_close(out, generic, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "kwargs, blocks",
    [
        ({"impl": "generic"}, False),
        ({"impl": "reference"}, False),
        ({"return_weights": True}, False),
        ({"return_lse": True}, False),
        ({"dropout_p": 0.1, "rng": "torch"}, False),
        ({"window": 2}, True),
        ({"is_causal": True, "q_offset": 3}, True),
        ({"is_causal": True, "causal_alignment": "bottom_right", "_kv_len": 9}, True),
        ({"is_causal": True, "attn_mask": "bool"}, True),
    ],
)
def test_generic_where_semantics_differ(sdpa_calls: list, kwargs: dict, blocks: bool) -> None:
    """No whole-call SDPA; with impl="auto" the blocked executor may run SDPA per block
    (with the call's scale), which the conformance matrix checks like any other path."""
    kwargs = dict(kwargs)
    q, k, v = _qkv((1, 2, 6, 8), (1, 2, kwargs.pop("_kv_len", 6), 8))
    if kwargs.get("rng") == "torch":
        kwargs["rng"] = torch.Generator().manual_seed(0)
    if kwargs.get("attn_mask") == "bool":
        kwargs["attn_mask"] = torch.ones(6, 6, dtype=torch.bool)
    out = ak.scaled_dot_product_attention(q, k, v, **kwargs)
    assert not any("enable_gqa" in c for c in sdpa_calls), f"{kwargs} must not use whole-call SDPA"
    assert all(c.get("scale") == pytest.approx(8**-0.5) for c in sdpa_calls)
    assert bool(sdpa_calls) == blocks, f"{kwargs}: per-block SDPA calls {len(sdpa_calls)}"
    if blocks:
        generic = ak.scaled_dot_product_attention(q, k, v, **{**kwargs, "impl": "generic"})
        torch.testing.assert_close(out, generic, rtol=1e-12, atol=1e-12)


def test_block_kernel_gets_one_additive_mask_per_block_shape(sdpa_calls: list) -> None:
    """SDPA turns a bool mask into an additive one on every call; the executor makes the
    additive form of a window's tile once per block shape (within the call: no state
    outlives it) and hands every interior block the same one."""
    q, k, v = _qkv((1, 2, 200, 8), (1, 2, 200, 8), seed=3)
    backend = ak.backends.load("torch")
    no_run = dataclasses.replace(backend.kernels, run=None)  # every block through SDPA
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(backend, "kernels", no_run)
        out = ak.scaled_dot_product_attention(q, k, v, window=(20, 20), block_size=16)
    masks = [c["attn_mask"] for c in sdpa_calls if c.get("attn_mask") is not None]
    assert len(masks) == len(sdpa_calls) > 2 and all(m.dtype == q.dtype for m in masks)
    interior = masks[2:-2]  # the blocks the sequence's ends do not clip
    assert interior and all(m is interior[0] for m in interior)
    ref = ak.scaled_dot_product_attention(q, k, v, window=(20, 20), impl="reference")
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)


def test_mask_written_in_place_between_calls_is_read_afresh() -> None:
    q, k, v = _qkv((1, 2, 6, 8), (1, 2, 6, 8), seed=3)
    mask = torch.ones(6, 6, dtype=torch.bool)
    first = ak.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    mask[:, 3:] = False
    second = ak.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask.clone())
    torch.testing.assert_close(second, expected, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(first, second)
