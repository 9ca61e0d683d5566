"""The report :func:`attnkit.testing.check_attention` returns; ``str()`` prints it.

Each differing case names what differs (the measured and allowed error and the rows, or
what was wrong with the result) and the convention behind it, with the frameworks that
follow it; skipped cases are counted by reason. A failing report ends with how to
declare the conventions found.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .detect import Finding
from .frameworks import describe

__all__ = ["AttentionCheckError", "CaseResult", "Report"]


class AttentionCheckError(AssertionError):
    """A check found differences; ``report`` is the :class:`Report` (its text is the
    message)."""

    def __init__(self, report: Report) -> None:
        super().__init__(str(report))
        self.report = report


@dataclass(frozen=True)
class CaseResult:
    """One case: ``status`` "passed", "differs" or "skipped"; ``lines`` what differs (or
    the reason it was skipped); ``explanations`` the findings that explain it (each one
    or two findings; several when the case cannot tell them apart)."""

    case: str
    dtype: str
    status: str
    lines: tuple[str, ...] = ()
    explanations: tuple[tuple[Finding, ...], ...] = ()
    call: str = ""
    compared: bool = False  # the result was measured (not refused, raised or misshapen)
    problem: Any = field(default=None, repr=False, compare=False)  # the call, as float64
    actual: Any = field(default=None, repr=False, compare=False)  # what came back, float64


def _explained(explanations: tuple[tuple[Finding, ...], ...]) -> str:
    if not explanations:
        return "no known convention explains it"
    words = ["; ".join(describe(f) for f in group) for group in explanations]
    if len(words) == 1:
        return words[0]
    return "one of: " + " ".join(f"({i}) {w}" for i, w in enumerate(words, 1))


@dataclass(frozen=True, repr=False)
class Report:
    """The outcome of a check: ``ok`` is False when any case differs; ``str()`` is the
    whole report, ``repr()`` its first lines."""

    function: str
    library: str
    results: tuple[CaseResult, ...]
    declared: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # about the run as a whole (the fuzzer, a bad function)

    @property
    def passed(self) -> list[CaseResult]:
        return [r for r in self.results if r.status == "passed"]

    @property
    def differing(self) -> list[CaseResult]:
        return [r for r in self.results if r.status == "differs"]

    @property
    def skipped(self) -> list[CaseResult]:
        return [r for r in self.results if r.status == "skipped"]

    @property
    def ok(self) -> bool:
        return not self.differing and bool(self.passed)

    def found(self) -> dict[str, list[str]]:
        """Every finding (``"empty_rows=mean"``, ``"ignores window"``) that alone explains
        a differing case, with the cases it explains."""
        out: dict[str, list[str]] = {}
        for r in self.differing:
            for group in r.explanations:
                for finding in group:
                    cases = out.setdefault(finding.key, [])
                    if r.case not in cases:
                        cases.append(r.case)
        return out

    def conventions(self) -> dict[str, str]:
        """The conventions the function follows, as ``conventions=`` takes them: those
        found in differing cases (when a case is explained one way only), over the
        declared ones."""
        chosen = dict(self.declared)
        for r in self.differing:
            if len(r.explanations) == 1:
                for f in r.explanations[0]:
                    if f.convention:
                        chosen[f.convention] = f.variant
        return chosen

    def __str__(self) -> str:
        verdict = "ok" if self.ok else "DIFFERS"
        lines = [
            f"attnkit.testing.check_attention: {self.function} ({self.library}): {verdict}",
            f"  {len(self.passed)} passed, {len(self.differing)} differ, "
            f"{len(self.skipped)} skipped",
        ]
        if self.declared:
            held = ", ".join(f"{k}={v!r}" for k, v in self.declared.items())
            lines.append(f"  held to the declared conventions: {held}")
        if self.differing:
            lines.append("\nDiffering:")
            for r in self.differing:
                lines.append(f"  {r.case} [{r.dtype}] ({r.call})")
                lines += [f"    {line}" for line in r.lines]
                if r.compared:
                    lines.append(f"    -> {_explained(r.explanations)}")
        reasons: dict[str, list[str]] = {}
        for r in self.skipped:
            reasons.setdefault(r.lines[0] if r.lines else "", []).append(f"{r.case} [{r.dtype}]")
        if reasons:
            lines.append("\nSkipped:")
            for reason, cases in reasons.items():
                names = ", ".join(cases[:5]) + (
                    f", +{len(cases) - 5} more" if len(cases) > 5 else ""
                )
                lines.append(f"  {len(cases)}: {reason} ({names})")
        if not self.passed and not self.differing and self.results:
            lines.append("\nNothing was checked: every case was skipped (the reasons above).")
        if self.notes:
            lines.append("")
            lines += [f"{note}" for note in self.notes]
        found = {k: v for k, v in self.conventions().items() if self.declared.get(k) != v}
        if found:
            declare = ", ".join(f"{k!r}: {v!r}" for k, v in found.items())
            lines.append(
                f"\nConventions found (other than attnkit's): pass conventions={{{declare}}} "
                "to hold the function to them instead."
            )
        return "\n".join(lines)

    def __repr__(self) -> str:
        return "<" + " ".join(str(self).splitlines()[:2]).replace("  ", " ") + ">"

    def raise_if_differs(self) -> None:
        """Raise :class:`AttentionCheckError` (an AssertionError) with this report unless
        it is ok."""
        if not self.ok:
            raise AttentionCheckError(self)
