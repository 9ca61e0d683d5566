"""attnkit as a Hugging Face transformers attention backend: ``attn_implementation="attnkit"``.

::

    from attnkit.backends.torch import hf

    hf.register()  # once per process: the attention and its mask, under "attnkit"
    model = AutoModel.from_pretrained(path, attn_implementation="attnkit")
    # or, on a loaded model: model.set_attn_implementation("attnkit")

transformers calls :func:`attention` as ``fn(module, query, key, value, attention_mask,
*, scaling, dropout, **kwargs)`` with query (B, Hq, L, E), key/value (B, Hkv, S, E|Ev)
and expects ``(output (B, L, Hq, Ev), weights (B, Hq, L, S) or None)``. Every number comes
from :func:`attnkit.scaled_dot_product_attention`:

- ``attention_mask`` from :func:`mask` (:mod:`.masking`): sdpa's bool (B, 1, L, S)
  mask, True = may attend, or None where attention is plainly causal; a mask given is
  the whole truth, as in eager. A float mask is added to the scores.
- no mask: causal when ``is_causal`` (kwarg, else ``module.is_causal``, else True, as
  sdpa), aligned ``bottom_right``; ``sliding_window=W`` then means
  ``window=(W - 1, W - 1)`` (FlashAttention's reading).
- GQA (Hkv < Hq) with ``enable_gqa=True``: key/value heads are never repeated.
- ``softcap=c``: ``attnkit.score_mods.softcap(c)``, c * tanh(scores / c) before masking.
- ``s_aux`` (H,) and ``sinks`` (B, H, L, 1): attention sinks, one extra logit per row with
  a zero value, merged by log-sum-exp; the weights returned exclude the sink, as eager's.
- ``position_bias`` (T5 family): added to the scores, -inf where the mask forbids.
- ``dropout``: only while ``module.training``; drawn from ``module.attnkit_generator``
  (:func:`set_dropout_generator`), else from a generator seeded from torch's global one.
- ``output_attentions=True`` (the kwarg, the config, transformers' output recorder or
  the model call's): the weights attnkit computed, never an eager fallback; if a layer
  still returns None, the call warns (:class:`attnkit.AttnkitWarning`).

Ignored, as eager ignores them: every other kwarg (:data:`HARMLESS_KWARGS`). Refused with
:class:`attnkit.ParameterError`: :data:`REFUSED_KWARGS` not None (``head_mask``, sparse
``indices``), and ``softcap`` with ``position_bias`` together. Families that do not
dispatch through transformers' attention interface are refused at load
(:mod:`.compat`).

Hugging Face families
---------------------

Each family is checked against eager on a padded batch (`tests/test_hf_families.py`).
"refused" means `from_pretrained(..., attn_implementation="attnkit")` raises
`attnkit.ParameterError` naming the implementation to use instead (the family computes
attention in its own code). The transformers column lists the releases each row was
checked on.

| family | status | transformers | checked |
|---|---|---|---|
| `llama` | runs | 5.24.0, 5.25.0 | logits, weights, generate (GQA) |
| `mistral` | runs | 5.24.0, 5.25.0 | logits, weights, generate (GQA) |
| `qwen2` | runs | 5.24.0, 5.25.0 | logits, weights, generate (GQA) |
| `qwen3` | runs | 5.24.0, 5.25.0 | logits, weights, generate (GQA) |
| `phi` | runs | 5.24.0, 5.25.0 | logits, weights, generate |
| `gemma` | runs | 5.24.0, 5.25.0 | logits, weights, generate (GQA) |
| `gemma2` | runs | 5.24.0, 5.25.0 | logits, weights, generate (soft-capping, sliding window) |
| `gpt2` | runs | 5.24.0, 5.25.0 | logits, weights, generate |
| `opt` | runs | 5.24.0, 5.25.0 | logits, weights, generate |
| `gpt_neox` | runs | 5.24.0, 5.25.0 | logits, weights, generate |
| `gptj` | runs | 5.24.0, 5.25.0 | logits, weights, generate |
| `starcoder2` | runs | 5.24.0, 5.25.0 | logits, weights, generate (GQA) |
| `bert` | runs | 5.24.0, 5.25.0 | hidden states, weights |
| `roberta` | runs | 5.24.0, 5.25.0 | hidden states, weights |
| `distilbert` | runs | 5.24.0, 5.25.0 | hidden states, weights |
| `electra` | runs | 5.24.0, 5.25.0 | hidden states, weights |
| `albert` | runs | 5.24.0, 5.25.0 | hidden states, weights |
| `t5` | runs | 5.24.0, 5.25.0 | encoder states, logits, encoder/decoder/cross weights, generate (position bias) |
| `bart` | runs | 5.24.0, 5.25.0 | encoder states, logits, encoder/decoder/cross weights, generate |
| `bloom` | refused | 5.24.0, 5.25.0 | use `eager` (ALiBi in its own code) |
| `falcon` | runs | 5.25.0 (refused on 5.24.0: attention in its own code) | logits, weights, generate |
| `mpt` | refused | 5.24.0, 5.25.0 | use `eager` |
| `deberta-v2` | refused | 5.24.0, 5.25.0 | use `eager` (disentangled attention in its own code) |

Other families: those whose modeling code uses `ALL_ATTENTION_FUNCTIONS` run attnkit;
the others are refused at load the same way.

Where attnkit differs from eager: a query row with nothing to attend (a left-padding
token under causal masking) gives output 0 and weights 0, where eager gives the mean of
the values (its -inf is `finfo.min`), and in float64 such a row stays finite where
eager's float32 softmax gives NaN. Every valid position is equal.
"""  # noqa: E501

from __future__ import annotations

from typing import Any

from attnkit.errors import ArgumentTypeError, ParameterError

from . import compat as hf_compat
from .interface import GENERATOR_ATTRIBUTE, HARMLESS_KWARGS, REFUSED_KWARGS, attention
from .masking import mask

__all__ = [
    "GENERATOR_ATTRIBUTE",
    "HARMLESS_KWARGS",
    "REFUSED_KWARGS",
    "attention",
    "mask",
    "register",
    "set_dropout_generator",
]


def register(name: str = "attnkit") -> str:
    """Register :func:`attention` and :func:`mask` with transformers under ``name``.

    Also makes transformers refuse ``name`` at load for a family whose attention never
    calls a registered function (Bloom, Falcon, DeBERTa-v2, ...: a ParameterError naming
    the family and the implementation to use), and accept ``config.output_attentions``
    with it (:mod:`attnkit.backends.torch.hf.compat`). Idempotent: registering again
    changes nothing. Returns ``name``, for ``attn_implementation=register()``.
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    if not isinstance(name, str) or not name:
        raise ParameterError(f"register needs a non-empty name, got {name!r}.")
    AttentionInterface.register(name, attention)
    AttentionMaskInterface.register(name, mask)
    hf_compat.NAMES.add(name)
    hf_compat.install()
    return name


def set_dropout_generator(model: Any, generator: Any) -> None:
    """Make attention dropout in ``model`` draw from ``generator`` (a ``torch.Generator``
    on the model's device), or from torch's global generator again with None."""
    import torch

    if generator is not None and not isinstance(generator, torch.Generator):
        raise ArgumentTypeError(
            f"generator must be a torch.Generator or None, got {type(generator).__name__}; "
            "create one with torch.Generator(device).manual_seed(seed)."
        )
    for module in model.modules():
        if generator is None:
            module.__dict__.pop(GENERATOR_ATTRIBUTE, None)
        else:
            module.__dict__[GENERATOR_ATTRIBUTE] = generator
