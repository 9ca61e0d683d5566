"""The attention function attnkit registers with Hugging Face transformers.

Its contract and what it does with each kwarg: :mod:`attnkit.backends.torch.hf`.
"""

from __future__ import annotations

import math
from typing import Any

import attnkit as ak
from attnkit.errors import ParameterError, ShapeError

from .compat import weights_requested

__all__ = ["GENERATOR_ATTRIBUTE", "HARMLESS_KWARGS", "REFUSED_KWARGS", "attention"]

#: kwargs transformers passes that do not change the math here: flags for what to
#: record or cache, positions (already in the rotary embeddings and the mask), packing
#: metadata for FlashAttention (packing reaches attnkit through the mask, as for sdpa),
#: the encoder states cross-attention already projected, and the loss normalizer.
HARMLESS_KWARGS = frozenset(
    {
        "cache",
        "cache_position",
        "cu_seq_lens_k",
        "cu_seq_lens_q",
        "deterministic",
        "encoder_hidden_states",
        "max_length_k",
        "max_length_q",
        "num_items_in_batch",
        "output_hidden_states",
        "output_router_logits",
        "past_key_values",
        "position_ids",
        "seq_idx",
        "token_type_ids",
        "use_cache",
    }
)
#: kwargs whose names say they change the math in a way attnkit does not compute (head
#: masks scale the probabilities; sparse ``indices`` pick the keys): refused when not None.
#: Every other kwarg is ignored, as every family's eager attention ignores it.
REFUSED_KWARGS = frozenset(
    {"cross_attn_head_mask", "head_mask", "layer_head_mask", "indices", "block_indices"}
)
#: The attribute of an attention module holding its dropout ``torch.Generator``.
GENERATOR_ATTRIBUTE = "attnkit_generator"


def attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    *,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[Any, Any]:
    """One attention call of a transformers model, computed by attnkit.

    Args:
        module: the calling attention module (``is_causal``, ``training``, ``config``).
        query: (B, Hq, L, E); key: (B, Hkv, S, E); value: (B, Hkv, S, Ev), Hq % Hkv == 0.
        attention_mask: None, bool (B|1, 1|Hq, L, S) (True = may attend) or additive float.
        scaling: the score scale (None: 1/sqrt(E)). dropout: used only in training mode.
        kwargs: see attnkit.backends.torch.hf (handled, harmless, or refused).

    Returns:
        ``(output (B, L, Hq, Ev), weights (B, Hq, L, S) or None)``, weights only when
        ``output_attentions`` is asked for.
    """
    if query.ndim != 4 or key.ndim != 4 or value.ndim != 4:
        raise ShapeError(
            f"the transformers attention takes query (B, Hq, L, E), key (B, Hkv, S, E) and "
            f"value (B, Hkv, S, Ev), got query {tuple(query.shape)}, key {tuple(key.shape)}, "
            f"value {tuple(value.shape)}."
        )
    options = _read_kwargs(module, kwargs, tuple(query.shape[:3]))
    L = query.shape[-2]
    causal, window = False, None
    if attention_mask is None:
        causal = options["is_causal"]
        if options["sliding_window"] is not None:
            window = (options["sliding_window"] - 1, options["sliding_window"] - 1)
        elif causal and L == 1:
            causal = False  # bottom_right with one query: every key, and SDPA's fast path
    attn_mask = _with_position_bias(attention_mask, options["position_bias"])
    p = float(dropout) if module.training else 0.0
    need_weights = options["output_attentions"]
    sinks = options["sinks"]
    result = ak.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask,
        dropout_p=p,
        is_causal=causal,
        scale=scaling,
        enable_gqa=key.shape[-3] != query.shape[-3],
        causal_alignment="bottom_right",
        window=window,
        return_weights=need_weights,
        return_lse=bool(sinks),
        rng=_dropout_rng(module, query) if p > 0 else None,
        score_mod=options["score_mod"],
    )
    out = result if not (need_weights or sinks) else result.output  # (B, Hq, L, Ev)
    weights = result.weights if need_weights else None  # (B, Hq, L, S)
    if sinks:
        out, weights = _merge_sinks(out, weights, result.lse, sinks)
    return out.transpose(1, 2).contiguous(), weights  # (B, L, Hq, Ev)


def _read_kwargs(module: Any, kwargs: dict[str, Any], bhl: tuple[int, int, int]) -> dict[str, Any]:
    """The math-changing kwargs, validated for query (B, Hq, L, E); raise on anything
    unknown that is not None."""
    kwargs = dict(kwargs)
    options: dict[str, Any] = {
        "is_causal": kwargs.pop("is_causal", None),
        "sliding_window": kwargs.pop("sliding_window", None),
        "position_bias": kwargs.pop("position_bias", None),
        "output_attentions": weights_requested(module, kwargs),
        "sinks": [],
        "score_mod": None,
    }
    if options["is_causal"] is None:
        options["is_causal"] = getattr(module, "is_causal", True)
    options["is_causal"] = bool(options["is_causal"])
    window = options["sliding_window"]
    if window is not None and (
        not isinstance(window, int) or isinstance(window, bool) or window < 1
    ):
        raise ParameterError(
            f"sliding_window must be a positive int (the keys a query sees, itself included) "
            f"or None, got {window!r}."
        )
    cap = kwargs.pop("softcap", None)
    if cap is not None:
        if options["position_bias"] is not None:
            raise ParameterError(
                "softcap and position_bias were given together; attnkit would cap the scores "
                "and then add the bias, and no model defines that order: use "
                "attn_implementation='eager' for this model."
            )
        try:
            options["score_mod"] = ak.score_mods.softcap(float(cap))
        except (TypeError, ValueError):
            raise ParameterError(
                f"softcap must be a positive finite number, got {cap!r}."
            ) from None
    for name in ("s_aux", "sinks"):
        sink = kwargs.pop(name, None)
        if sink is not None:
            options["sinks"].append(_sink_logits(name, sink, *bhl))
    for name, value in kwargs.items():
        if value is None or name not in REFUSED_KWARGS:
            continue  # eager ignores it too
        raise ParameterError(
            f"the transformers model passed {name}={_describe(value)} to the attention, a "
            f"kwarg that changes the math (head masks scale the weights, sparse indices pick "
            f"the keys) and that attnkit does not compute, so attnkit refuses rather than "
            f"ignore it. Use attn_implementation='eager' for this model, or drop {name} from "
            f"the call."
        )
    return options


def _describe(value: Any) -> str:
    shape = getattr(value, "shape", None)
    return f"<{type(value).__name__} of shape {tuple(shape)}>" if shape is not None else repr(value)


def _with_position_bias(attention_mask: Any, bias: Any) -> Any:
    """The mask with a position bias (B|1, H, L, S) folded in as an additive float mask."""
    if bias is None:
        return attention_mask
    import torch

    if attention_mask is None:
        return bias
    if attention_mask.dtype == torch.bool:
        return torch.where(attention_mask, bias, -math.inf)  # (B, H, L, S)
    return attention_mask + bias


def _sink_logits(name: str, sink: Any, B: int, H: int, L: int) -> Any:
    """A sink as logits (B|1, H, L|1): ``s_aux`` has one per head, ``sinks`` one per row."""
    if name == "s_aux" and sink.numel() == H:
        return sink.reshape(1, H, 1)
    if name == "sinks" and sink.ndim == 4 and tuple(sink.shape[1:]) in ((H, L, 1), (H, 1, 1)):
        if sink.shape[0] in (1, B):
            return sink[..., 0]  # (B|1, H, L|1)
    raise ShapeError(
        f"{name} has shape {tuple(sink.shape)}; attnkit takes s_aux with one logit per query "
        f"head ({H} values) and sinks of shape (B, H, L, 1) = {(B, H, L, 1)}."
    )


def _merge_sinks(out: Any, weights: Any, lse: Any, sinks: list[Any]) -> tuple[Any, Any]:
    """Attention with extra zero-value logits per row: each sink is one more piece of
    the softmax, with output 0 and log-sum-exp equal to its logit."""
    logits = [sink.to(lse.dtype).expand(lse.shape) for sink in sinks]  # (B, H, L) each
    zero = out.new_zeros(())  # a sink contributes no value
    pieces = [out] + [zero.expand(out.shape)] * len(logits)
    merged, total = ak.merge_partials(pieces, [lse, *logits])
    if weights is not None:  # the key weights shrink by the mass the sinks took
        share = _exp_or_zero(lse, total)  # (B, H, L)
        weights = weights * share[..., None].to(weights.dtype)
    return merged, weights


def _exp_or_zero(lse: Any, total: Any) -> Any:
    """exp(lse - total), and 0 where the row had no key (lse = -inf), never NaN."""
    import torch

    empty = torch.isinf(lse)
    return torch.where(empty, 0.0, torch.exp(torch.where(empty, 0.0, lse - total)))


def _dropout_rng(module: Any, like: Any) -> Any:
    """The module's generator, or a fresh one seeded from torch's global generator."""
    import torch

    generator = getattr(module, GENERATOR_ATTRIBUTE, None)
    if generator is not None:
        return generator
    seed = int(torch.randint(0, 2**62, (), dtype=torch.int64))
    return torch.Generator(device=like.device).manual_seed(seed)
