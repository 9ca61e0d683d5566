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

- ``attention_mask`` from :func:`mask` (registered under the same name; without a mask
  function transformers passes no mask at all and padded batches come out wrong): a bool
  (B, 1, L, S) mask, True = may attend, exactly the one transformers builds for sdpa, or
  None when attention is plainly causal with the last query on the last key (or full
  with no padding), so the core runs structured causal attention (no L x S mask, and
  key blocks above the diagonal never read). A mask given is the whole truth, as in
  eager: causal and sliding windows are in it. A float mask is added to the scores.
- no mask: causal when ``is_causal`` (kwarg, else ``module.is_causal``, else True, as
  sdpa), aligned ``bottom_right`` (the last query sees the last key: cached decoding,
  as FlashAttention); ``sliding_window=W`` then means ``window=(W - 1, W - 1)``
  (FlashAttention's reading; with causal, the W - 1 keys before the query and itself).
- GQA (Hkv < Hq) with ``enable_gqa=True``: key/value heads are never repeated.
- ``softcap=c``: ``attnkit.score_mods.softcap(c)``, c * tanh(scores / c) before masking.
- ``s_aux`` (H,) (GPT-OSS) and ``sinks`` (B, H, L, 1): attention sinks, one extra logit
  per row with a zero value, merged exactly with the row's log-sum-exp
  (:func:`attnkit.merge_partials`); the weights returned exclude the sink, as eager's.
- ``position_bias`` (T5 family): added to the scores, -inf where the mask forbids.
- ``dropout``: only while ``module.training``; drawn from ``module.attnkit_generator``
  (see :func:`set_dropout_generator`), else from a ``torch.Generator`` seeded from
  torch's global generator, so ``torch.manual_seed`` makes a run repeatable, as eager's.
- ``output_attentions=True`` (or ``config.output_attentions``, or transformers' output
  recorder collecting attentions, as GPT-2 and OPT do, or the model call's
  ``output_attentions`` where the attention module keeps the kwarg, as Falcon's does from
  transformers 5.25): the weights attnkit computed (``return_weights=True``), never an
  eager fallback; if a release still withholds the request, the call warns
  (:class:`attnkit.AttnkitWarning`, naming ``attn_implementation="eager"``) rather than
  return a silent None.

Ignored, as every family's eager attention ignores them: every other kwarg (those known
are :data:`HARMLESS_KWARGS`: positions, cache objects, packing metadata, a tokenizer's
``token_type_ids``). Refused with :class:`attnkit.ParameterError` naming the kwarg:
:data:`REFUSED_KWARGS` not None (``head_mask``, DeepSeek's sparse ``indices``: they change
the math), and ``softcap`` with ``position_bias`` together (no model defines their order).

Families: only those whose attention dispatches through transformers' attention interface
call a registered function; :func:`register` makes transformers refuse the others at load
(:mod:`attnkit.backends.torch.hf_compat`). The README's table lists the families tested.

Where attnkit differs from eager: a query row with nothing to attend (a left-padding
row under causal masking) gives output 0 and weights 0; eager gives the mean of the
values and uniform weights there (its -inf is ``finfo.min``). Every other row is equal.

This module registers; the attention function is ``hf_attention.py``, the mask function
``hf_mask.py``.
"""

from __future__ import annotations

from typing import Any

from attnkit.errors import ArgumentTypeError, ParameterError

from . import hf_compat
from .hf_attention import GENERATOR_ATTRIBUTE, HARMLESS_KWARGS, REFUSED_KWARGS, attention
from .hf_mask import mask

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
    with it (:mod:`attnkit.backends.torch.hf_compat`). Idempotent: registering again
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
