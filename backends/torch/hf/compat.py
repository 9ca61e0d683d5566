"""Which transformers families attnkit serves, and the two places transformers must let it in.

transformers calls a registered attention function only from families whose attention
modules dispatch through ``ALL_ATTENTION_FUNCTIONS``; the others read
``config._attn_implementation`` themselves. :func:`install` makes transformers ask at
load, so such a family is refused with an attnkit error naming the implementation to
use, and lets ``config.output_attentions = True`` stand with attnkit.

A forward pre-hook notes each model call's ``output_attentions`` for
:func:`weights_requested`; a forward hook warns if weights were asked for and a layer's
came back ``None``.
"""

from __future__ import annotations

import contextvars
import functools
import sys
import warnings
from typing import Any

from attnkit.errors import AttnkitWarning, ParameterError

__all__ = ["install", "routes_through_interface", "weights_requested"]

#: The names :func:`attnkit.backends.torch.hf.register` registered.
NAMES: set[str] = set()
_INSTALLED = "_attnkit_wrapped"
_HOOKED = "_attnkit_output_attentions_hooks"
#: The ``output_attentions`` of the model calls in progress, innermost last (None where a
#: call did not say; the innermost one that did decides).
_REQUESTS: contextvars.ContextVar[tuple[bool | None, ...]] = contextvars.ContextVar(
    "attnkit_output_attentions", default=()
)


def routes_through_interface(model_class: type) -> bool:
    """Whether ``model_class``'s attention calls the registered attention function: it
    says so (``_supports_attention_backend``) or its modeling module dispatches through
    ``ALL_ATTENTION_FUNCTIONS`` (T5, BART and Whisper do without saying so)."""
    if getattr(model_class, "_supports_attention_backend", False):
        return True
    module = sys.modules.get(model_class.__module__)
    return module is not None and "ALL_ATTENTION_FUNCTIONS" in vars(module)


def _refuse(model: Any, name: str) -> None:
    cls = type(model)
    family = getattr(getattr(model, "config", None), "model_type", None) or cls.__name__
    instead = "sdpa" if getattr(cls, "_supports_sdpa", False) else "eager"
    raise ParameterError(
        f"the transformers family {family!r} ({cls.__name__}) computes its attention itself "
        f"and never calls a registered attention function, so attn_implementation={name!r} "
        f"would be ignored or misread (its mask taken for another kind). Load it with "
        f"attn_implementation={instead!r}; attnkit serves the families that dispatch "
        f"through transformers' attention interface (the families table: "
        f"help(attnkit.backends.torch.hf))."
    )


def install() -> None:
    """Wrap transformers' load-time check and the ``output_attentions`` setter (once)."""
    from transformers import PretrainedConfig, PreTrainedModel

    check = PreTrainedModel._check_and_adjust_attn_implementation
    if not getattr(check, _INSTALLED, False):

        @functools.wraps(check)
        def checked(self: Any, attn_implementation: Any, *args: Any, **kwargs: Any) -> Any:
            chosen = check(self, attn_implementation, *args, **kwargs)
            if chosen in NAMES:
                if not routes_through_interface(type(self)):
                    _refuse(self, chosen)
                _hook_requests(self)
            return chosen

        setattr(checked, _INSTALLED, True)
        PreTrainedModel._check_and_adjust_attn_implementation = checked

    prop = PretrainedConfig.__dict__.get("output_attentions")
    if isinstance(prop, property) and not getattr(prop.fset, _INSTALLED, False):
        setter = prop.fset

        def set_output_attentions(config: Any, value: bool) -> None:
            if value and config._attn_implementation in NAMES:
                config._output_attentions = value  # attnkit returns its weights
                return
            setter(config, value)

        setattr(set_output_attentions, _INSTALLED, True)
        PretrainedConfig.output_attentions = property(prop.fget, set_output_attentions, prop.fdel)

    validate = getattr(PretrainedConfig, "validate_output_attentions", None)
    if validate is not None and not getattr(validate, _INSTALLED, False):

        @functools.wraps(validate)
        def validated(config: Any) -> Any:
            if config._attn_implementation in NAMES:
                return None
            return validate(config)

        setattr(validated, _INSTALLED, True)
        PretrainedConfig.validate_output_attentions = validated


def _requested() -> bool | None:
    """The ``output_attentions`` of the innermost model call in progress that gave one."""
    for value in reversed(_REQUESTS.get()):
        if value is not None:
            return bool(value)
    return None


def _hook_requests(model: Any) -> None:
    """Note each call's ``output_attentions`` while ``model`` runs (hooks added once)."""
    if getattr(model, _HOOKED, False):
        return

    def before(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        _REQUESTS.set((*_REQUESTS.get(), kwargs.get("output_attentions")))

    def after(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        stack = _REQUESTS.get()
        asked = _requested()
        _REQUESTS.set(stack[:-1])
        if stack[:-1] or not asked or module.config._attn_implementation not in NAMES:
            return  # an inner model, or weights not asked for, or no longer attnkit
        fields = getattr(output, "__dataclass_fields__", {})  # a ModelOutput, not a tuple
        for name in ("attentions", "encoder_attentions", "decoder_attentions", "cross_attentions"):
            if name not in fields:
                continue
            layers = getattr(output, name)
            if name == "cross_attentions" and not layers:
                continue  # a model without cross-attention (GPT-2's field stays empty)
            missing = (
                "is None"
                if layers is None
                else "is empty"
                if not layers
                else f"holds None for {sum(w is None for w in layers)} of {len(layers)} layers"
                if any(w is None for w in layers)
                else ""
            )
            if missing:
                warnings.warn(
                    f"{type(module).__name__} was asked for its attention weights "
                    f"(output_attentions=True) but its {name} {missing}: this transformers "
                    f"release does not pass the request on to attn_implementation="
                    f"{module.config._attn_implementation!r}. Load the model with "
                    f'attn_implementation="eager" to get the weights.',
                    AttnkitWarning,
                    stacklevel=2,
                )
                return

    model.register_forward_pre_hook(before, with_kwargs=True)
    model.register_forward_hook(after, with_kwargs=True, always_call=True)
    object.__setattr__(model, _HOOKED, True)


def weights_requested(module: Any, kwargs: dict[str, Any]) -> bool:
    """Whether the model wants this call's attention weights: ``output_attentions`` in the
    kwargs, in the model call in progress (Falcon keeps the kwarg from its attention
    function) or the config, or transformers' output recorder collecting attentions (GPT-2
    and OPT drop the kwarg before it reaches the attention and record the weights with a
    forward hook on the attention module)."""
    if (
        kwargs.get("output_attentions")
        or _requested()
        or getattr(getattr(module, "config", None), "output_attentions", False)
    ):
        return True
    try:
        from transformers.utils.output_capturing import _active_collector
    except ImportError:  # an older transformers: the kwarg is the only signal
        return False
    collecting = _active_collector.get()
    return bool(collecting) and any("attentions" in key for key in collecting)
