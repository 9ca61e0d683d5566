"""Adapters: a function with another signature, seen through attnkit's call.

Each wraps a function into ``fn(query (B, Hq, L, E), key, value, **kwargs)``, declares
what it supports, and raises :class:`~attnkit.testing.Unsupported` where it cannot:

- :func:`time_first`: a (B, T, N, H) function such as ``jax.nn.dot_product_attention``;
- :func:`window_size`: FlashAttention's ``window_size=(left, right)`` (-1 = unbounded);
- :func:`sliding_window`: Hugging Face's causal ``sliding_window=W``;
- :func:`attnkit_attention`: attnkit itself, ``softcap=c`` as a score_mod.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any

from array_api_compat import array_namespace

from .. import scaled_dot_product_attention, score_mods
from ..errors import ParameterError
from .problem import CALL_KEYWORDS
from .run import Unsupported
from .translate import to_flash_window_size, to_hf_sliding_window, to_jax_local_window_size

__all__ = [
    "attnkit_attention",
    "declare",
    "declared_options",
    "signature_supports",
    "sliding_window",
    "time_first",
    "window_size",
]

ATTRIBUTE = "__attnkit_check__"
#: What :func:`declare` may attach: check_attention's keyword arguments.
OPTIONS = (
    "supports",
    "conventions",
    "examples",
    "dtypes",
    "gradients",
    "library",
    "device",
    "cases",
)


def declare(fn: Callable[..., Any], **options: Any) -> Callable[..., Any]:
    """``fn`` with :func:`~attnkit.testing.check_attention`'s keyword arguments attached
    (``supports``, ``library``, ``dtypes``, ``gradients``, ``conventions``, ...): the
    check, the pytest plugin and ``attnkit verify --against`` use them as defaults.
    Returns a wrapper; ``fn`` itself is not changed."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ParameterError(
            f"declare got {', '.join(unknown)}, not options of check_attention; they are "
            f"{', '.join(OPTIONS)}."
        )
    if not callable(fn):
        raise ParameterError(f"declare needs a function, got {type(fn).__name__} {fn!r}.")

    @functools.wraps(fn)
    def declared(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    setattr(declared, ATTRIBUTE, {**declared_options(fn), **options})
    return declared


def declared_options(fn: Any) -> dict[str, Any]:
    """The options attached by :func:`declare` ({} if none)."""
    return dict(getattr(fn, ATTRIBUTE, {}) or {})


def signature_supports(
    fn: Callable[..., Any], renames: dict[str, str] | None = None
) -> frozenset[str] | None:
    """attnkit's keyword arguments ``fn`` takes, from its signature (``renames`` maps the
    function's parameter names to attnkit's); None when it takes ``**kwargs`` or has no
    signature to read, and nothing was declared."""
    if "supports" in declared_options(fn):
        return frozenset(declared_options(fn)["supports"])
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    names = {p.name for p in params}
    found = {n for n in names if n in CALL_KEYWORDS}
    found |= {ours for theirs, ours in (renames or {}).items() if theirs in names}
    return frozenset(found)


def _adapted(wrapper: Callable[..., Any], fn: Callable[..., Any], supports: Iterable[str]) -> Any:
    options = {k: v for k, v in declared_options(fn).items() if k != "supports"}
    return declare(wrapper, **options, supports=frozenset(supports))


def time_first(
    fn: Callable[..., Any],
    *,
    mask: str | None = "mask",
    bias: str | None = "bias",
    window: str | None = "local_window_size",
    softcap: str | None = None,
    value_like_key: bool = False,
    supports: Iterable[str] | None = None,
) -> Callable[..., Any]:
    """``fn`` taking query (B, T, N, H), key and value (B, S, K, H) and returning
    (B, T, N, H), seen as attnkit's (B, N, T, H) call. A bool ``attn_mask`` goes to the
    parameter ``mask``, an additive one to ``bias`` (both made 4-D), ``window`` to
    ``local_window_size`` (a pair), ``softcap`` to the parameter named so; GQA is the
    fewer key/value heads alone (``enable_gqa`` is not passed on). ``value_like_key``:
    the function needs value shaped like key (Ev == E). ``supports`` defaults to what
    ``fn``'s signature names."""
    renames = {
        name: ours
        for name, ours in (
            (mask, "attn_mask"),
            (bias, "attn_mask"),
            (window, "window"),
            (softcap, "softcap"),
        )
        if name
    }
    found = signature_supports(fn, renames) if supports is None else frozenset(supports)
    found = frozenset(found or ()) | {"enable_gqa"}

    def adapted(query: Any, key: Any, value: Any, **kwargs: Any) -> Any:
        xp = array_namespace(query, key, value)
        if value_like_key and value.shape[-1] != key.shape[-1]:
            raise Unsupported(f"{_name(fn)} needs value shaped like key (Ev == E)")
        kwargs.pop("enable_gqa", None)
        call: dict[str, Any] = {}
        m = kwargs.pop("attn_mask", None)
        if m is not None:
            m = xp.reshape(m, (1,) * (4 - m.ndim) + tuple(m.shape))  # (B|1, N|1, L|1, S)
            kind, target = ("bool", mask) if m.dtype == xp.bool else ("additive", bias)
            if target is None:
                raise Unsupported(f"{_name(fn)} takes no {kind} mask")
            call[target] = m
        if kwargs.get("window") is not None:
            try:
                call[window or "local_window_size"] = to_jax_local_window_size(kwargs["window"])
            except ParameterError as exc:
                raise Unsupported(str(exc)) from None
        kwargs.pop("window", None)
        if "softcap" in kwargs:
            call[softcap or "softcap"] = kwargs.pop("softcap")
        swap = (0, 2, 1, 3)
        q, k, v = (xp.permute_dims(x, swap) for x in (query, key, value))  # (B, T, N, H)
        out = fn(q, k, v, **call, **kwargs)  # (B, T, N, H)
        return xp.permute_dims(out, swap)  # (B, N, T, H)

    return _adapted(functools.wraps(fn)(adapted), fn, found)


def window_size(fn: Callable[..., Any], *, name: str = "window_size") -> Callable[..., Any]:
    """``fn`` taking FlashAttention's ``window_size=(left, right)`` (-1: unbounded), seen
    as taking attnkit's ``window`` (same sides, None unbounded)."""
    found = set(signature_supports(fn, {name: "window"}) or ()) | {"window"}

    def adapted(query: Any, key: Any, value: Any, **kwargs: Any) -> Any:
        if kwargs.get("window") is not None:
            kwargs[name] = to_flash_window_size(kwargs["window"])
        kwargs.pop("window", None)
        return fn(query, key, value, **kwargs)

    return _adapted(functools.wraps(fn)(adapted), fn, found)


def sliding_window(fn: Callable[..., Any], *, name: str = "sliding_window") -> Callable[..., Any]:
    """``fn`` taking Hugging Face's causal ``sliding_window=W`` (query i sees keys
    i-W+1 .. i), seen as taking attnkit's ``window``; only windows (W-1, 0) are
    expressible, others are skipped."""
    found = set(signature_supports(fn, {name: "window"}) or ()) | {"window"}

    def adapted(query: Any, key: Any, value: Any, **kwargs: Any) -> Any:
        if kwargs.get("window") is not None:
            try:
                kwargs[name] = to_hf_sliding_window(kwargs["window"])
            except ParameterError as exc:
                raise Unsupported(str(exc)) from None
        kwargs.pop("window", None)
        return fn(query, key, value, **kwargs)

    return _adapted(functools.wraps(fn)(adapted), fn, found)


def attnkit_attention(query: Any, key: Any, value: Any, **kwargs: Any) -> Any:
    """``attnkit.scaled_dot_product_attention``, with ``softcap=c`` passed as
    ``score_mod=attnkit.score_mods.softcap(c)``: attnkit as the kit checks it."""
    cap = kwargs.pop("softcap", None)
    if cap is not None:
        kwargs["score_mod"] = score_mods.softcap(cap)
    return scaled_dot_product_attention(query, key, value, **kwargs)


setattr(attnkit_attention, ATTRIBUTE, {"supports": frozenset(CALL_KEYWORDS)})


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
