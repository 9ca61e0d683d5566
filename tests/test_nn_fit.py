"""The drop-in ``MultiheadAttention`` inside torch's own machinery
(``backends/torch/nn/fit.py``): torch's Transformer layers in every mode (train, eval,
eval + no_grad, where torch takes its native fused layer and nested tensors), whichever
order the module is swapped in, and ``torch.autocast``. Compared with the same layers
holding ``torch.nn.MultiheadAttention`` with the same weights; tolerances stated per
check."""

from __future__ import annotations

import copy
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from attnkit.backends.torch.nn import MultiheadAttention  # noqa: E402

import attnkit as ak  # noqa: E402

D, H = 16, 4
F32 = 2e-6  # float32 outputs of a 2-layer encoder of size ~1: a few roundings
BF16 = 3e-2  # bfloat16 (8 mantissa bits) through projections and softmax, outputs ~1


def swapped(attn: Any) -> MultiheadAttention:
    """attnkit's drop-in holding ``attn``'s weights."""
    mine = MultiheadAttention(D, H, batch_first=attn.batch_first, dropout=attn.dropout)
    mine.load_state_dict(attn.state_dict())
    return mine


def encoders(batch_first: bool, order: str) -> tuple[Any, Any]:
    """(attnkit's encoder, torch's), 2 layers, the drop-in swapped in before or after
    ``nn.TransformerEncoder`` is built (after: torch kept its nested-tensor fast path)."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(
        D, H, dim_feedforward=32, dropout=0.0, batch_first=batch_first
    )
    theirs = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=True)
    if order == "before":
        mine_layer = copy.deepcopy(layer)
        mine_layer.self_attn = swapped(layer.self_attn)
        mine = torch.nn.TransformerEncoder(mine_layer, 2, enable_nested_tensor=True)
        for a, b in zip(mine.layers, theirs.layers, strict=True):
            a.load_state_dict(b.state_dict())
    else:
        mine = copy.deepcopy(theirs)
        for block in mine.layers:
            block.self_attn = swapped(block.self_attn)
    return mine, theirs


def padded_input(batch_first: bool) -> tuple[Any, Any, Any]:
    """x, its key padding mask (True = padding; rows of 7, 5 and 3 tokens), valid rows."""
    x = torch.randn(3, 7, D) if batch_first else torch.randn(7, 3, D)
    padding = torch.zeros(3, 7, dtype=torch.bool)
    padding[1, 5:], padding[2, 3:] = True, True
    return x, padding, ~padding if batch_first else (~padding).T


def dense(t: Any) -> Any:
    return torch.nested.to_padded_tensor(t, 0.0) if t.is_nested else t


def assert_close(actual: Any, expected: Any, atol: float, what: str) -> None:
    assert actual.shape == expected.shape, f"{what}: {actual.shape} != {expected.shape}"
    err = float((actual.double() - expected.double()).abs().max())
    assert err <= atol, f"{what}: max |attnkit - torch| = {err:.2e} > allowed {atol:.0e}"


@pytest.mark.parametrize("mode", ["train", "eval", "eval-no-grad"])
@pytest.mark.parametrize("order", ["before", "after"])
@pytest.mark.parametrize("batch_first", [True, False], ids=["batch-first", "seq-first"])
def test_encoder_in_every_mode_equals_torch(mode: str, order: str, batch_first: bool) -> None:
    mine, theirs = encoders(batch_first, order)
    x, padding, valid = padded_input(batch_first)
    for module in (mine, theirs):
        module.train(mode == "train")
    with torch.no_grad() if mode == "eval-no-grad" else torch.enable_grad():
        for a, b, what in (
            (
                mine(x, src_key_padding_mask=padding),
                theirs(x, src_key_padding_mask=padding),
                "encoder",
            ),
            (
                mine.layers[0](x, src_key_padding_mask=padding),
                theirs.layers[0](x, src_key_padding_mask=padding),
                "one layer",
            ),
            (
                mine(
                    x, is_causal=True, mask=torch.nn.Transformer.generate_square_subsequent_mask(7)
                ),
                theirs(
                    x, is_causal=True, mask=torch.nn.Transformer.generate_square_subsequent_mask(7)
                ),
                "causal encoder",
            ),
        ):
            a, b = dense(a), dense(b)
            assert_close(a[valid], b[valid], F32, f"{what}, {mode}, swapped {order}")


def test_attnkit_math_runs_inside_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """In eval + no_grad torch's layer would call its native fused kernel with the module's
    weights; the drop-in keeps it on the path that calls attnkit."""
    mine, _ = encoders(True, "after")
    mine.eval()
    calls = []
    real = ak.multi_head_attention
    monkeypatch.setattr(
        ak, "multi_head_attention", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    x, padding, _ = padded_input(True)
    with torch.no_grad():
        mine(x, src_key_padding_mask=padding)
    assert len(calls) == 2, "each layer's attention went through attnkit"


def test_decoder_layer_equals_torch() -> None:
    torch.manual_seed(0)
    theirs = torch.nn.TransformerDecoderLayer(
        D, H, dim_feedforward=32, dropout=0.0, batch_first=True
    ).eval()
    mine = copy.deepcopy(theirs)
    mine.self_attn, mine.multihead_attn = swapped(theirs.self_attn), swapped(theirs.multihead_attn)
    tgt, memory = torch.randn(2, 5, D), torch.randn(2, 7, D)
    causal = torch.nn.Transformer.generate_square_subsequent_mask(5)
    with torch.no_grad():
        a = mine(tgt, memory, tgt_mask=causal, tgt_is_causal=True)
        b = theirs(tgt, memory, tgt_mask=causal, tgt_is_causal=True)
    assert_close(a, b, F32, "decoder layer")


def test_autocast_returns_the_autocast_dtype_like_torch() -> None:
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(D, H, batch_first=True)
    mine = swapped(theirs)
    x, padding, _ = padded_input(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, weights = mine(x, x, x, key_padding_mask=padding)
        want, want_weights = theirs(x, x, x, key_padding_mask=padding)
    assert out.dtype == want.dtype == torch.bfloat16
    assert weights.dtype == want_weights.dtype == torch.bfloat16
    assert_close(out, want, BF16, "bfloat16 output under autocast")
    assert_close(weights, want_weights, BF16, "bfloat16 weights under autocast")
    exact, _ = swapped(theirs).double()(*(x.double(),) * 3, key_padding_mask=padding)
    assert_close(out, exact, BF16, "bfloat16 output against float64")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out.float().sum().backward()
    assert mine.in_proj_weight.grad is not None and mine.in_proj_weight.grad.dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):  # float64 is left alone, as torch does
        assert mine.double()(*(x.double(),) * 3)[0].dtype == torch.float64


def test_nested_input_is_self_attention_only() -> None:
    mine = MultiheadAttention(D, H, batch_first=True)
    nested = torch.nested.nested_tensor([torch.randn(4, D), torch.randn(2, D)])
    out, weights = mine(nested, nested, nested, need_weights=False)
    assert out.is_nested and [t.shape[0] for t in out.unbind()] == [4, 2] and weights is None
    with pytest.raises(ak.ParameterError, match="self-attention"):
        mine(nested, torch.randn(2, 4, D), nested)
    with pytest.raises(ak.ParameterError, match="attn_mask"):
        mine(nested, nested, nested, attn_mask=torch.zeros(4, 4, dtype=torch.bool))
