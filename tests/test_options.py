"""``Options`` is the one source of an attention call's names: every public signature that
restates its fields is pinned to it here (names, order, defaults, annotations), and
``Options.of`` refuses a name it does not know."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

import attnkit as ak
from attnkit.options import ARRAY_NAMES, OPTION_NAMES, Options


def _partial_vjp() -> Callable[..., Any]:
    from attnkit.ring.backward import partial_attention_vjp

    return partial_attention_vjp


def _check_call() -> Callable[..., Any]:
    from attnkit.call_checks import check_call

    return check_call


#: The public functions whose options are ``Options.of(locals())``, with their arrays and
#: the options each leaves out (and why).
PINNED: dict[str, tuple[Callable[[], Callable[..., Any]], tuple[str, ...], set[str]]] = {
    "scaled_dot_product_attention": (
        lambda: ak.scaled_dot_product_attention, ARRAY_NAMES[:3], set()
    ),
    "explain": (lambda: ak.explain, ARRAY_NAMES[:3], set()),
    "check_call": (_check_call, ARRAY_NAMES[:3], set()),
    # a gradient, not outputs: no weights or lse to ask for
    "attention_vjp": (lambda: ak.attention_vjp, ARRAY_NAMES[:3], {"return_weights", "return_lse"}),
    # one (query piece, key piece) pair of a ring: no dropout, weights or lse
    "partial_attention_vjp": (
        _partial_vjp,
        ARRAY_NAMES,
        {"dropout_p", "rng", "return_weights", "return_lse"},
    ),
}  # fmt: skip


#: The options torch's ``F.scaled_dot_product_attention`` takes by position too.
_TORCH_POSITIONAL = ("attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


@pytest.mark.parametrize("name", sorted(PINNED))
def test_signature_is_options(name: str) -> None:
    """Arrays first, then the options in Options' order with its defaults, types and
    kinds (SDPA's: torch's positional ones positional too, the rest keyword-only); the only
    options absent are the ones named above."""
    get, arrays, left_out = PINNED[name]
    params = inspect.signature(get()).parameters
    names = list(params)
    assert tuple(names[: len(arrays)]) == arrays, f"{name}: arrays {names[: len(arrays)]}"
    want = [o for o in OPTION_NAMES if o not in left_out]
    assert names[len(arrays) :] == want, f"{name}: options {names[len(arrays) :]}, want {want}"
    hints = {n: getattr(h, "__forward_arg__", h) for n, h in Options.__annotations__.items()}
    kinds = inspect.signature(ak.scaled_dot_product_attention).parameters
    for option in want:
        param = params[option]
        if option in _TORCH_POSITIONAL:
            assert kinds[option].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        else:
            assert kinds[option].kind is inspect.Parameter.KEYWORD_ONLY, option
        assert param.kind is kinds[option].kind, f"{name}({option}): {param.kind}"
        default = Options._field_defaults[option]
        assert param.default == default, f"{name}({option}={param.default!r}), Options: {default!r}"
        assert str(param.annotation) == str(hints[option]), (
            f"{name}({option}: {param.annotation}), Options: {hints[option]}"
        )


@pytest.mark.parametrize("fn", [ak.multi_head_attention, ak.multi_head_attention_vjp])
def test_multi_head_options_default_as_options(fn: Callable[..., Any]) -> None:
    """The multi-head layer takes its own parameters too; those named after an option
    default as the option does."""
    params = inspect.signature(fn).parameters
    shared = [n for n in params if n in OPTION_NAMES]
    assert shared, f"{fn.__name__} takes no option"
    for option in shared:
        default = Options._field_defaults[option]
        got = params[option].default
        assert got == default, f"{fn.__name__}({option}={got!r}), Options: {default!r}"


def test_of_every_option() -> None:
    args = dict.fromkeys(ARRAY_NAMES[:3]) | {n: object() for n in OPTION_NAMES}
    options = Options.of(args)
    assert all(getattr(options, n) is args[n] for n in OPTION_NAMES)


def test_of_absent_options_default() -> None:
    options = Options.of({"query": 1, "key": 2, "value": 3, "out": 4, "is_causal": True})
    assert options == Options(is_causal=True)


@pytest.mark.parametrize("extra", [{"is_casual": True}, {"windows": 3, "is_causal": True}])
def test_of_refuses_unknown_names(extra: dict[str, Any]) -> None:
    args = dict.fromkeys(ARRAY_NAMES[:3]) | extra
    with pytest.raises(TypeError, match=sorted(set(extra) - set(OPTION_NAMES))[0]) as info:
        Options.of(args)
    assert "Options fields" in str(info.value)


def test_of_refuses_unknown_name_beside_every_option() -> None:
    """The fast path (every option given) still sees a name too many."""
    args = dict.fromkeys(ARRAY_NAMES[:3]) | dict.fromkeys(OPTION_NAMES) | {"scaling": 2.0}
    with pytest.raises(TypeError, match="scaling"):
        Options.of(args)
