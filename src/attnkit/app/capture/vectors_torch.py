"""The query and key vectors of a Hugging Face model's attention, as its scores use them.

transformers (>= 5) calls each layer's attention through its attention interface, with
``query`` (B, Hq, L, E) and ``key`` (B, Hkv, S, E) after rotary embeddings and before
scaling. :func:`recording` registers :data:`CAPTURE_NAME`, an implementation that keeps
(query, key, scaling) of every call and then calls the implementation the model was
using, with its mask function, so outputs and weights are unchanged::

    with recording(model, "eager") as calls:
        model(**inputs, output_attentions=True)
    queries, keys, scale, note = vectors(calls, weights.shape)  # (N, H, L, E) twice

Then ``weights == softmax(scale * queries @ keys^T + mask)`` per layer and head. A family
that computes attention itself, an implementation with no mask function, or scores that
are not ``scale * q . k + mask`` (softcap, position bias, sinks) give no vectors:
:class:`Unavailable`, or ``None`` from :func:`vectors` with the reason.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from attnkit.backends.torch.hf.compat import routes_through_interface
from attnkit.errors import ParameterError

__all__ = ["CAPTURE_NAME", "Call", "Recording", "Unavailable", "recording", "register", "vectors"]

#: The name the recording implementation is registered under.
CAPTURE_NAME = "attnkit_vectors"
#: kwargs that add something to the scores beyond ``scale * q . k + mask``.
_SCORE_CHANGING = ("softcap", "position_bias", "s_aux", "sinks")

_ACTIVE: contextvars.ContextVar[Recording | None] = contextvars.ContextVar(
    "attnkit_vectors_recording", default=None
)


class Unavailable(ParameterError):
    """This model cannot give its query and key vectors (the message says why)."""


@dataclass
class Call:
    """One attention call: query (B, Hq, L, E), key (B, Hkv, S, E), detached, and its
    scale; ``changes_scores`` names the kwargs that added to the scores."""

    query: Any
    key: Any
    scale: float
    changes_scores: tuple[str, ...]


@dataclass
class Recording:
    """The calls of one forward pass, delegated to ``inner``."""

    inner: str
    calls: list[Call] = field(default_factory=list)


def _inner_function(module: Any, name: str) -> Any:
    """The attention function the model would call for implementation ``name``."""
    if name == "eager":
        family = sys.modules.get(type(module).__module__)
        fn = getattr(family, "eager_attention_forward", None)
        if fn is None:
            raise Unavailable(
                f"{type(module).__name__} ({type(module).__module__}) has no module-level "
                "eager_attention_forward to delegate to"
            )
        return fn
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    return ALL_ATTENTION_FUNCTIONS[name]


def _attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    *args: Any,
    **kwargs: Any,
) -> Any:
    """Record (query, key, scaling), then run the implementation being recorded."""
    active = _ACTIVE.get()
    if active is None:  # called outside recording(): behave as eager
        return _inner_function(module, "eager")(
            module, query, key, value, attention_mask, *args, **kwargs
        )
    scaling = kwargs.get("scaling")
    if scaling is None:
        scaling = query.shape[-1] ** -0.5  # every eager_attention_forward's default
    changes = tuple(name for name in _SCORE_CHANGING if kwargs.get(name) is not None)
    active.calls.append(Call(query.detach(), key.detach(), float(scaling), changes))
    fn = _inner_function(module, active.inner)
    return fn(module, query, key, value, attention_mask, *args, **kwargs)


def _mask(*args: Any, **kwargs: Any) -> Any:
    """The mask of the implementation being recorded (eager: additive, sdpa: bool, ...)."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    active = _ACTIVE.get()
    return ALL_MASK_ATTENTION_FUNCTIONS[active.inner if active else "eager"](*args, **kwargs)


def register() -> str:
    """Register the recording attention and mask functions (idempotent); returns the name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(CAPTURE_NAME, _attention)
    AttentionMaskInterface.register(CAPTURE_NAME, _mask)
    return CAPTURE_NAME


def _check_recordable(model: Any, inner: str) -> None:
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    cls = type(model)
    can_set = getattr(cls, "_can_set_attn_implementation", lambda: True)()
    if not (routes_through_interface(cls) and can_set):
        family = getattr(model.config, "model_type", None) or cls.__name__
        raise Unavailable(
            f"the {family!r} family ({cls.__name__}) computes its attention itself, not "
            "through transformers' attention interface, so its vectors cannot be recorded"
        )
    if inner not in ALL_MASK_ATTENTION_FUNCTIONS._global_mapping:
        raise Unavailable(
            f"attn_implementation={inner!r} takes no attention mask (a FlashAttention or "
            "paged kernel): record the vectors with eager or attnkit"
        )


@contextlib.contextmanager
def recording(model: Any, inner: str) -> Iterator[Recording]:
    """Record every attention call of ``model`` (running ``inner``) inside the block.

    Raises :class:`Unavailable` before any change when the family cannot be recorded.
    The model's attention implementation (every sub-config's) is restored on exit.
    """
    _check_recordable(model, inner)
    register()
    configs = {id(m.config): m.config for m in model.modules() if hasattr(m, "config")}
    saved = {key: c._attn_implementation_internal for key, c in configs.items()}
    active = Recording(inner)
    token = _ACTIVE.set(active)
    try:
        model.set_attn_implementation(CAPTURE_NAME)
        if model.config._attn_implementation != CAPTURE_NAME:
            raise Unavailable(f"{type(model).__name__} refused a new attention implementation")
        yield active
    finally:
        _ACTIVE.reset(token)
        for key, config in configs.items():
            config._attn_implementation_internal = saved[key]


def vectors(
    active: Recording, shape: tuple[int, int, int, int]
) -> tuple[Any, Any, float | None, str]:
    """(queries (N, H, L, E), keys (N, H, S, E), scale, note) from the first sequence of
    a recording whose weights have ``shape`` (N, H, L, S); (None, None, None, why) when the
    calls do not make ``scale * q . k + mask`` scores of that shape.

    Key heads are repeated to the H query heads (GQA: query head h reads key head
    h // (H / Hkv), as transformers' ``repeat_kv``). Layers with different scales (GPT-2's
    ``scale_attn_by_inverse_layer_idx``) have the ratio folded into their queries, so one
    ``scale`` (the first layer's) holds for all; the note says so.
    """
    import torch

    N, H, L, S = shape
    calls = active.calls
    if len(calls) != N:
        return None, None, None, f"the model made {len(calls)} attention calls for {N} layers"
    if not calls[0].scale:
        return None, None, None, "the first layer's scale is 0"
    changed = sorted({name for call in calls for name in call.changes_scores})
    if changed:
        return (
            None,
            None,
            None,
            (f"its scores are not scale * q . k + mask (the model passes {', '.join(changed)})"),
        )
    queries, keys = [], []
    for n, call in enumerate(calls):
        q, k = call.query[0], call.key[0]  # (Hq, L, E), (Hkv, S, E)
        if q.shape[0] != H or q.shape[1] != L or k.shape[1] != S or H % k.shape[0]:
            return (
                None,
                None,
                None,
                (
                    f"layer {n}'s call has query {tuple(call.query.shape)} and key "
                    f"{tuple(call.key.shape)}, not the weights' (H, L, S) = {(H, L, S)}"
                ),
            )
        k = k.repeat_interleave(H // k.shape[0], dim=0)  # (H, S, E)
        queries.append(q.float() * (call.scale / calls[0].scale))
        keys.append(k.float())
    scales = [call.scale for call in calls]
    note = ""
    if any(not math.isclose(s, scales[0], rel_tol=1e-6) for s in scales):
        note = (
            f"each layer's scale folded into its queries (scales {scales[0]:.4g}..{scales[-1]:.4g})"
        )
    q_all = torch.stack(queries).contiguous().cpu()  # (N, H, L, E)
    k_all = torch.stack(keys).contiguous().cpu()  # (N, H, S, E)
    return q_all, k_all, scales[0], note
