"""The named conventions: each known way attention implementations differ, as data.

A :class:`Convention` has a name, what it is about, a default (attnkit's choice) and its
variants, each with the words a report prints. What each variant does to the expected
result: :mod:`attnkit.testing.expect`; which frameworks follow which:
:mod:`attnkit.testing.frameworks`.

========================  ==================================================================
convention                variants (the first is attnkit's)
========================  ==================================================================
empty_rows                zero, mean, nan: a row with no allowed key (bool mask, causal,
                          window) gives 0, the mean of the values (uniform weights) or NaN
empty_rows_additive       zero, mean, nan: the same for a row an additive mask sets to -inf
causal_alignment          top_left, bottom_right: ``is_causal`` with L != S and no
                          ``causal_alignment`` argument
window_bounds             inclusive (query i sees keys i-left .. i+right), and each side one
                          key short or one key wide
window_int                pair, total: an int window W means (W, W) or W // 2 per side
mask_polarity             true_attends, true_masks: what True means in a bool mask
softcap                   tanh, tanh_before_scale, rational, ignored: how ``softcap=c``
                          bounds the scores s
default_scale             inv_sqrt_e, inv_sqrt_ev, inv_e, one: the scale when none is given
gqa_mapping               grouped, interleaved: which key/value head query head h reads
float64_precision         float64, float32: the accuracy of float64 inputs
masked_key_nonfinite      ignored, leaks: NaN or inf in a key no query may attend
masked_value_nonfinite    ignored, leaks: NaN or inf in a value no query may attend
========================  ==================================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import ParameterError

__all__ = ["CONVENTIONS", "DEFAULTS", "Convention", "Variant", "check_declared"]


@dataclass(frozen=True)
class Variant:
    """One way of a convention: its name (what ``conventions={...}`` takes) and its words."""

    name: str
    words: str


@dataclass(frozen=True)
class Convention:
    """A named way implementations differ; ``variants[0]`` is attnkit's (the default)."""

    name: str
    about: str
    variants: tuple[Variant, ...]

    @property
    def default(self) -> str:
        return self.variants[0].name

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(name)


def _c(name: str, about: str, *variants: tuple[str, str]) -> Convention:
    return Convention(name, about, tuple(Variant(n, w) for n, w in variants))


#: Window bound variants: (left, right) change of the bounds each stands for.
WINDOW_SHIFTS = {
    "inclusive": (0, 0),
    "exclusive": (-1, -1),
    "exclusive_left": (-1, 0),
    "exclusive_right": (0, -1),
    "wider": (1, 1),
    "wider_left": (1, 0),
    "wider_right": (0, 1),
}

CONVENTIONS: dict[str, Convention] = {
    c.name: c
    for c in (
        _c(
            "empty_rows",
            "rows with no allowed key (a bool mask, causal or window leaves none)",
            ("zero", "rows with no allowed key give 0"),
            ("mean", "rows with no allowed key give the mean of the values (uniform weights)"),
            ("nan", "rows with no allowed key give NaN"),
        ),
        _c(
            "empty_rows_additive",
            "rows an additive mask sets to -inf everywhere",
            ("zero", "rows an additive mask sets to -inf everywhere give 0"),
            ("mean", "rows an additive mask sets to -inf everywhere give the mean of the values"),
            ("nan", "rows an additive mask sets to -inf everywhere give NaN"),
        ),
        _c(
            "causal_alignment",
            "is_causal with L != S (no causal_alignment argument)",
            ("top_left", "causal masks are aligned top-left: query i sees keys 0 .. i"),
            (
                "bottom_right",
                "causal masks are aligned bottom-right: query i sees keys 0 .. i + S - L",
            ),
        ),
        _c(
            "window_bounds",
            "window=(left, right)",
            ("inclusive", "window=(left, right) lets query i see keys i-left .. i+right"),
            ("exclusive", "window bounds are exclusive: each side sees one key fewer"),
            (
                "exclusive_left",
                "the window's left side sees one key fewer: left counts the query itself, "
                "a total size as Hugging Face's sliding_window counts it (keys i-left+1 .. i)",
            ),
            ("exclusive_right", "the window's right side sees one key fewer"),
            ("wider", "the window sees one key more on each side"),
            ("wider_left", "the window's left side sees one key more"),
            ("wider_right", "the window's right side sees one key more"),
        ),
        _c(
            "window_int",
            "an int window W",
            ("pair", "an int window W means (W, W)"),
            ("total", "an int window W is the total width: W // 2 keys on each side"),
        ),
        _c(
            "mask_polarity",
            "bool attn_mask",
            ("true_attends", "in a bool mask True means may attend"),
            ("true_masks", "in a bool mask True means masked (may not attend)"),
        ),
        _c(
            "softcap",
            "softcap=c",
            ("tanh", "softcap=c caps the scaled scores s as c * tanh(s / c)"),
            (
                "tanh_before_scale",
                "softcap=c caps the scores before scaling: scale * c * tanh(qk / c)",
            ),
            ("rational", "softcap=c caps the scaled scores as s / (1 + |s| / c)"),
            ("ignored", "softcap is ignored (no cap applied)"),
        ),
        _c(
            "default_scale",
            "the scale when none is given",
            ("inv_sqrt_e", "the default scale is 1/sqrt(E)"),
            ("inv_sqrt_ev", "the default scale is 1/sqrt(Ev), the value's features"),
            ("inv_e", "the default scale is 1/E"),
            ("one", "the scores are not scaled by default (scale 1)"),
        ),
        _c(
            "gqa_mapping",
            "grouped-query attention",
            ("grouped", "query head h reads key/value head h // (Hq / Hkv) (grouped)"),
            ("interleaved", "query head h reads key/value head h % Hkv (interleaved)"),
        ),
        _c(
            "float64_precision",
            "float64 inputs",
            ("float64", "float64 inputs are computed in float64"),
            ("float32", "float64 inputs are computed at float32 precision"),
        ),
        _c(
            "masked_key_nonfinite",
            "NaN or inf in a key no query may attend",
            ("ignored", "NaN or inf in a masked key never reaches a row"),
            ("leaks", "NaN or inf in a masked key leaks into the rows (NaN)"),
        ),
        _c(
            "masked_value_nonfinite",
            "NaN or inf in a value no query may attend",
            ("ignored", "NaN or inf in a masked value never reaches a row"),
            ("leaks", "NaN or inf in a masked value leaks into the rows (0 * NaN is NaN)"),
        ),
    )
}

#: attnkit's choice for every convention.
DEFAULTS: dict[str, str] = {name: c.default for name, c in CONVENTIONS.items()}


def check_declared(conventions: Mapping[str, str] | None, argument: str) -> dict[str, str]:
    """``DEFAULTS`` updated with ``conventions``; an unknown name or variant raises a
    :class:`~attnkit.errors.ParameterError` naming ``argument`` and the choices."""
    if conventions is None:
        return dict(DEFAULTS)
    if not isinstance(conventions, Mapping):
        raise ParameterError(
            f"{argument} must be a mapping of convention name to variant, got "
            f"{type(conventions).__name__} {conventions!r}; for example "
            "{'empty_rows': 'mean'}."
        )
    chosen = dict(DEFAULTS)
    for name, variant in conventions.items():
        if name not in CONVENTIONS:
            raise ParameterError(
                f"{argument} names an unknown convention {name!r}; the conventions are "
                f"{', '.join(sorted(CONVENTIONS))}."
            )
        choices = [v.name for v in CONVENTIONS[name].variants]
        if variant not in choices:
            raise ParameterError(
                f"{argument}[{name!r}] = {variant!r} is not a variant of {name}; choose one of "
                f"{', '.join(repr(c) for c in choices)}."
            )
        chosen[name] = variant
    return chosen
