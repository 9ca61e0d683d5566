"""Every transformers family attnkit is tried on: it runs attnkit and equals eager, or is
refused at load with an attnkit error that names the family and the alternative.

Which of the two is read from the installed transformers, not written here: a family
whose modeling module calls the registered attention function
(:func:`attnkit.backends.torch.hf.compat.routes_through_interface`) must run, the others
must be refused. The families table of :mod:`attnkit.backends.torch.hf`'s docstring records
what each row was checked on; a family that moved between transformers releases fails
:func:`test_documented_table_is_this_table` with
one message naming it, the version and what changed.

Each family is a tiny randomly initialized model (2 layers, 4 heads, float32, seeded)
built from its config. A family that runs is checked on a padded batch (left padding for
decoders, right padding for encoders): outputs on the real tokens and the attention
weights of the real query rows (``output_attentions=True``: one tensor per layer, never
an empty tuple) against eager; decoders also against eager's greedy ``generate()`` tokens.
A refused family raises :class:`attnkit.ParameterError` from ``from_config`` naming the
family and ``eager``/``sdpa``. The docstring's "Hugging Face families" table is this table.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers reads it: no network
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from attnkit.backends.torch import hf  # noqa: E402
from attnkit.backends.torch.hf import compat as hf_compat  # noqa: E402

import attnkit as ak  # noqa: E402

NAME = hf.register()
F32_OUT = 3e-5  # float32 logits / hidden states of size <= ~5 after 2 layers
F32_WEIGHTS = 1e-5  # float32 attention weights, in [0, 1]
TINY = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,  # GQA where the family has it
    max_position_embeddings=64,
    initializer_range=0.3,  # peaked attention, so a wrong mask shows
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)

# family -> model kind: "decoder" (causal LM, left padding, generate), "encoder"
# (bidirectional, right padding), "seq2seq" (encoder-decoder, generate).
FAMILIES: dict[str, str] = {
    "llama": "decoder",
    "mistral": "decoder",
    "qwen2": "decoder",
    "qwen3": "decoder",
    "phi": "decoder",
    "gemma": "decoder",
    "gemma2": "decoder",
    "gpt2": "decoder",
    "opt": "decoder",
    "gpt_neox": "decoder",
    "gptj": "decoder",
    "starcoder2": "decoder",
    "bert": "encoder",
    "roberta": "encoder",
    "distilbert": "encoder",
    "electra": "encoder",
    "albert": "encoder",
    "t5": "seq2seq",
    "bart": "seq2seq",
    "bloom": "decoder",
    "falcon": "decoder",
    "mpt": "decoder",
    "deberta-v2": "encoder",
}
VERSION = transformers.__version__
# What a family names otherwise (or needs small) to be as tiny as TINY.
OVERRIDES: dict[str, dict[str, Any]] = {
    "gptj": {"rotary_dim": 4},
    "t5": dict(d_model=32, d_ff=48, d_kv=8, num_heads=4, num_layers=2, num_decoder_layers=2),
    "bart": dict(
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=48,
        decoder_ffn_dim=48,
    ),
}


def config_and_auto(family: str) -> tuple[Any, Any]:
    """The tiny config of ``family`` and the Auto class that builds its model."""
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForSeq2SeqLM

    kind = FAMILIES[family]
    config = AutoConfig.for_model(family, **TINY | OVERRIDES.get(family, {}))
    if kind == "seq2seq":
        config.decoder_start_token_id = 0
    auto = {"decoder": AutoModelForCausalLM, "encoder": AutoModel}.get(kind, AutoModelForSeq2SeqLM)
    return config, auto


def status(family: str) -> str:
    """ "runs" where the installed transformers' modeling code of ``family`` calls the
    registered attention function, else "refused"."""
    config, auto = config_and_auto(family)
    model_class = auto._model_mapping[type(config)]
    return "runs" if hf_compat.routes_through_interface(model_class) else "refused"


STATUS = {family: status(family) for family in FAMILIES}
RUNS = [f for f in FAMILIES if STATUS[f] == "runs"]
REFUSED = [f for f in FAMILIES if STATUS[f] == "refused"]


def build(family: str, impl: str) -> Any:
    config, auto = config_and_auto(family)
    torch.manual_seed(0)
    return auto.from_config(config, attn_implementation=impl).eval()


def padded(kind: str, batch: int = 3, length: int = 9) -> tuple[Any, Any]:
    """Token ids (3..63) and a 2-D mask with 0, 3 and 6 padding tokens, on the left for
    decoders (as generate() wants) and on the right otherwise."""
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 64, (batch, length), generator=gen)
    mask = torch.ones(batch, length, dtype=torch.long)
    for b in range(batch):
        if kind == "decoder":
            mask[b, : 3 * b] = 0
        elif b:
            mask[b, length - 3 * b :] = 0
    return ids, mask


def assert_close(actual: Any, expected: Any, atol: float, what: str) -> None:
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert not torch.isnan(actual).any(), f"{what}: NaN in attnkit's result"
    err = float((actual - expected).abs().max()) if actual.numel() else 0.0
    assert err <= atol, f"{what}: max |attnkit - eager| = {err:.3e} > allowed {atol:.1e}"


def forward(model: Any, kind: str, ids: Any, mask: Any) -> Any:
    extra = {"decoder_input_ids": ids[:, :4]} if kind == "seq2seq" else {}
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, output_attentions=True, **extra)


@pytest.mark.parametrize("family", RUNS)
def test_family_equals_eager(family: str) -> None:
    kind = FAMILIES[family]
    ids, mask = padded(kind)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ak.AttnkitWarning)  # weights asked for must come
        got = forward(build(family, NAME), kind, ids, mask)
    want = forward(build(family, "eager"), kind, ids, mask)
    family = f"{family} (runs on transformers {VERSION})"  # names the release in messages
    valid = mask.bool()
    main = "logits" if kind == "decoder" else "last_hidden_state"
    if kind == "seq2seq":  # the decoder's rows attend the whole padded encoder output
        assert_close(
            got.encoder_last_hidden_state[valid],
            want.encoder_last_hidden_state[valid],
            F32_OUT,
            f"{family} encoder output",
        )
        assert_close(got.logits, want.logits, F32_OUT, f"{family} decoder logits")
    else:
        assert_close(got[main][valid], want[main][valid], F32_OUT, f"{family} {main}")
    kinds = (
        ["attentions"]
        if kind != "seq2seq"
        else ["encoder_attentions", "decoder_attentions", "cross_attentions"]
    )
    for name in kinds:
        weights, eager = getattr(got, name), getattr(want, name)
        assert len(weights) == len(eager) == 2, f"{family} {name}: {len(weights)} layers returned"
        for layer, (w, e) in enumerate(zip(weights, eager, strict=True)):
            assert w is not None and w.shape == e.shape, f"{family} {name} layer {layer}"
            if name in ("encoder_attentions", "attentions"):
                rows = valid[:, None, :, None].expand_as(w)  # real query rows
                w, e = w[rows], e[rows]
            assert_close(w, e, F32_WEIGHTS, f"{family} {name} layer {layer}")


@pytest.mark.parametrize("family", [f for f in RUNS if FAMILIES[f] != "encoder"])
def test_family_generate_equals_eager(family: str) -> None:
    kind = FAMILIES[family]
    ids, mask = padded(kind)
    tokens = {}
    for impl in (NAME, "eager"):
        model = build(family, impl)
        with torch.no_grad():
            tokens[impl] = model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=5,
                do_sample=False,
                min_new_tokens=5,
            )
    assert torch.equal(tokens[NAME], tokens["eager"]), (
        f"{family} (runs on transformers {VERSION}): generate() tokens differ:\n"
        f"{tokens[NAME]}\neager:\n{tokens['eager']}"
    )


@pytest.mark.parametrize("family", REFUSED)
def test_family_refused_at_load(family: str) -> None:
    try:
        build(family, NAME)
    except ak.ParameterError as error:
        message = str(error)
    else:
        pytest.fail(
            f"{family}: transformers {VERSION}'s modeling code computes its attention itself "
            f"(no ALL_ATTENTION_FUNCTIONS), yet loading it with attn_implementation={NAME!r} "
            f"was not refused"
        )
    assert repr(family) in message and ("'eager'" in message or "'sdpa'" in message), message
    build(family, "eager")  # the alternative named loads


def test_a_loaded_refused_family_keeps_eager_when_switched() -> None:
    """transformers itself declines to switch such a family (with a warning)."""
    model = build("bloom", "eager")
    model.set_attn_implementation(NAME)
    assert model.config._attn_implementation == "eager"


def test_config_output_attentions_stands_with_attnkit() -> None:
    model = build("gpt2", NAME)
    model.config.output_attentions = True  # transformers allows this with eager only
    ids, mask = padded("decoder")
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask)
    assert len(out.attentions) == 2 and out.attentions[0].shape == (3, 4, 9, 9)
    model.config.output_attentions = False
    with torch.no_grad():
        assert not model(input_ids=ids, attention_mask=mask).attentions


def test_tokenizer_extras_are_ignored_as_eager_ignores_them() -> None:
    """A Llama tokenizer's token_type_ids reach the attention through **kwargs."""
    ids, mask = padded("decoder")
    model = build("llama", NAME)
    with torch.no_grad():
        plain = model(input_ids=ids, attention_mask=mask).logits
        extra = model(
            input_ids=ids,
            attention_mask=mask,
            token_type_ids=torch.zeros_like(ids),
            some_new_flag=True,
        ).logits
    assert torch.equal(plain, extra)


def documented_table() -> dict[str, tuple[str, str]]:
    """The families table of ``attnkit.backends.torch.hf``'s docstring: family -> (status,
    the transformers versions it was checked on)."""
    section = (hf.__doc__ or "").split("Hugging Face families\n---", 1)[1]
    rows = re.findall(r"^\| `([\w-]+)` \| (\w+) \| ([^|]*) \|", section, flags=re.M)
    return {family: (state, versions.strip()) for family, state, versions in rows}


def test_documented_table_is_this_table() -> None:
    table = documented_table()
    assert sorted(table) == sorted(FAMILIES), (
        f"documented families {sorted(table)} != tested families {sorted(FAMILIES)}"
    )
    moved = [
        f"{family!r}: hf's docstring says {table[family][0]} (checked on transformers "
        f"{table[family][1]}), but on transformers {VERSION} its modeling code "
        + (
            "calls the registered attention function, so attnkit runs it"
            if STATUS[family] == "runs"
            else "computes its attention itself, so attnkit refuses it"
        )
        for family in FAMILIES
        if table[family][0] != STATUS[family]
    ]
    assert not moved, "families moved between transformers releases:\n" + "\n".join(moved)
    constraints = (Path(__file__).parent / "constraints.txt").read_text()
    if f"\ntransformers=={VERSION}\n" not in constraints:
        return  # the drift session (nox -s latest): only a move is a failure
    unchecked = [f for f in FAMILIES if VERSION not in table[f][1]]
    assert not unchecked, (
        f"documented rows not marked as checked on the pinned transformers {VERSION} "
        f"(tests/constraints.txt): {unchecked}"
    )


@pytest.mark.parametrize("family", [f for f in ("llama", "gpt2", "falcon") if f in RUNS])
def test_weights_withheld_by_a_release_warn(family: str, monkeypatch: Any) -> None:
    """If a release keeps the request from the attention function (as Falcon's attention
    module does with ``output_attentions`` from 5.25, which attnkit now reads from the
    model call), the call warns naming eager rather than returning a silent None."""
    monkeypatch.setattr(
        "attnkit.backends.torch.hf.interface.weights_requested", lambda *a, **k: False
    )
    ids, mask = padded("decoder")
    model = build(family, NAME)
    with pytest.warns(ak.AttnkitWarning, match='attn_implementation="eager"'):
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask, output_attentions=True)
    assert not out.attentions or any(w is None for w in out.attentions)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ak.AttnkitWarning)  # not asked for: silent
        with torch.no_grad():
            model(input_ids=ids, attention_mask=mask)
