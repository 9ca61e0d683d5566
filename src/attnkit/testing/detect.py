"""Which convention a differing result follows: the detectors.

A result that differs from the expectation under the declared conventions is measured
against the expectation with one convention changed to each of its other variants (and
with each keyword argument of the call dropped, for a function that ignores one); the
changes that make it agree explain it. When no single change does, pairs of changes are
tried. Only changes that alter the expectation of this call count.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .compare import compare
from .conventions import CONVENTIONS
from .expect import Expected, expect
from .problem import Problem

__all__ = ["Finding", "explain", "narrow", "resolve"]


@dataclass(frozen=True)
class Finding:
    """A convention's variant the result follows, or a keyword argument it ignores."""

    convention: str = ""
    variant: str = ""
    ignored: str = ""  # the keyword argument, e.g. "window"

    @property
    def key(self) -> str:
        return f"ignores {self.ignored}" if self.ignored else f"{self.convention}={self.variant}"


def _expect(p: Problem, conv: Mapping[str, str], ignore: frozenset[str]) -> Expected | None:
    """The expectation, or None where the change leaves no valid call (GQA heads without
    ``enable_gqa`` do not broadcast)."""
    try:
        return expect(p, conv, ignore)
    except ValueError:
        return None


def _same(a: Expected | None, b: Expected | None) -> bool:
    if a is None or b is None:
        return True  # no call to tell apart
    return (
        a.allowed == b.allowed
        and np.array_equal(a.out, b.out, equal_nan=True)
        and np.array_equal(a.nan_ok, b.nan_ok)
    )


def _fits(actual: np.ndarray, e: Expected | None) -> bool:
    if e is None:
        return False
    return actual.shape == e.out.shape and compare(actual, e.out, e.allowed, e.nan_ok).ok


def _all_changes(
    p: Problem, declared: Mapping[str, str]
) -> list[tuple[Finding, dict[str, str], frozenset[str]]]:
    """Every single change: each other variant of each convention, each argument dropped."""
    found = []
    for name, convention in CONVENTIONS.items():
        for variant in convention.variants:
            if variant.name != declared[name]:
                changed = {**declared, name: variant.name}
                found.append((Finding(name, variant.name), changed, frozenset()))
    for argument in p.call_kwargs():
        if argument != "causal_alignment" or p.kwargs.get("is_causal"):
            found.append((Finding(ignored=argument), dict(declared), frozenset({argument})))
    return found


def explain(
    p: Problem, actual: np.ndarray, declared: Mapping[str, str]
) -> tuple[tuple[Finding, ...], ...]:
    """The explanations of ``actual`` (float64, the expected shape): each a tuple of one
    or two findings under which it agrees; empty when nothing known explains it.

    Pairs start from a change that alters this call's expectation and add any other
    change that alters it further (a bottom-right causal mask with L > S empties rows,
    which only then tell the empty-row conventions apart)."""
    base = expect(p, declared)
    every = _all_changes(p, declared)
    relevant = []
    for finding, conv, ignore in every:
        e = _expect(p, conv, ignore)
        if not _same(e, base):
            relevant.append((finding, conv, ignore, e))
    singles = [(f,) for f, _, _, e in relevant if _fits(actual, e)]
    if singles:
        return tuple(singles)
    pairs: list[tuple[Finding, Finding]] = []
    for f1, c1, i1, e1 in relevant:
        for f2, c2, i2 in every:
            if f2 == f1 or (f1.convention and f1.convention == f2.convention):
                continue
            if (f2, f1) in pairs or (f1, f2) in pairs:
                continue
            conv = {**c1, **{k: v for k, v in c2.items() if v != declared[k]}}
            e12 = _expect(p, conv, i1 | i2)
            if not _same(e12, e1) and _fits(actual, e12):
                pairs.append((f1, f2))
    return tuple(pairs)


def _apply(finding: Finding, declared: Mapping[str, str]) -> tuple[dict[str, str], frozenset[str]]:
    if finding.ignored:
        return dict(declared), frozenset({finding.ignored})
    return {**declared, finding.convention: finding.variant}, frozenset()


def narrow(
    explanations: tuple[tuple[Finding, ...], ...],
    agreeing: list[Problem],
    declared: Mapping[str, str],
) -> tuple[tuple[Finding, ...], ...]:
    """The explanations no agreeing call contradicts: a finding is contradicted by a call
    the function got right whose expectation that finding would change (a NaN that leaks
    through masked values cannot be an inverted mask polarity if the bool-mask cases
    agree). When every explanation is contradicted, all are kept."""
    if len(explanations) < 2:
        return explanations
    verdict: dict[Finding, bool] = {}

    def contradicted(f: Finding) -> bool:
        if f not in verdict:
            conv, ignore = _apply(f, declared)
            verdict[f] = any(
                not _same(_expect(p, conv, ignore), _expect(p, declared, frozenset()))
                for p in agreeing
            )
        return verdict[f]

    kept = tuple(group for group in explanations if not any(contradicted(f) for f in group))
    return kept or explanations


def resolve(
    p: Problem,
    actual: np.ndarray,
    declared: Mapping[str, str],
    established: Mapping[str, str],
    agreeing: list[Problem],
    explanations: tuple[tuple[Finding, ...], ...],
) -> tuple[tuple[Finding, ...], ...]:
    """A case's explanations, given the conventions other cases established on their own
    (one explanation each): those that change this call are assumed, and what remains
    is explained on top of them, less what ``agreeing`` (calls the function gets right
    under the established conventions) contradicts. Falls back to ``explanations``
    narrowed the same way (:func:`narrow`)."""
    base = _expect(p, declared, frozenset())
    assumed = {**declared, **established}
    relevant = tuple(
        Finding(c, v)
        for c, v in established.items()
        if v != declared[c] and not _same(_expect(p, {**declared, c: v}, frozenset()), base)
    )
    if relevant:
        if _fits(actual, _expect(p, assumed, frozenset())):
            return (relevant,)
        more = narrow(explain(p, actual, assumed), agreeing, assumed)
        if more:
            return tuple((*relevant, *group) for group in more)
    return narrow(explanations, agreeing, assumed)
