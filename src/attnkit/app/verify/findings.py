"""``attnkit verify``'s report on the frameworks: a summary table per framework and dtype,
then the findings in plain words (which framework differs from the exact answer where,
by how much, and what attnkit gives there), and the same as JSON for machines.

A finding's words are the conventions :mod:`attnkit.testing` detects behind it, as its
reports word them; each says whether the kit's frameworks table
(:mod:`attnkit.testing.frameworks`, which the README's comparison is made from) gives
the framework that convention, so a framework that changes its behaviour shows here."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..tables import table
from . import Agreement, FrameworkResult

__all__ = ["Finding", "findings", "findings_text", "frameworks_table", "report_json"]

#: Which attnkit backend answers for a framework (for "what attnkit gives").
_BACKEND = {
    "torch SDPA": "torch",
    "torch MultiheadAttention": "torch",
    "FlexAttention (eager)": "torch",
    "jax.nn": "jax",
    "keras.ops": "jax",
}


@dataclass(frozen=True)
class Finding:
    """One way a framework differs from the exact answer, over the vectors it affects."""

    framework: str
    dtype: str
    kind: str  # "empty rows", "precision", "differs", "refused"
    what: str  # in words
    conventions: tuple[str, ...]  # attnkit.testing's findings ("empty_rows=mean")
    declared: bool  # the kit's frameworks table gives the framework these conventions
    vectors: tuple[str, ...]
    max_error: float | None  # the largest error over those vectors (None: NaN or not run)
    attnkit: str  # what attnkit gives there, in words


def _attnkit_words(kind: str, framework: str, dtype: str, agreements: list[Agreement]) -> str:
    backend = _BACKEND.get(framework, "")
    mine = [a for a in agreements if a.backend == backend and a.dtype == dtype]
    measured = (
        f"max error {mine[0].max_error:.1e} on {backend} {dtype}"
        + ("" if not mine[0].failures else f", {len(mine[0].failures)} failures")
        if mine
        else f"not run on {backend} {dtype} here"
    )
    if kind == "empty rows":
        return f"0 on those rows, the oracle's answer ({measured})"
    if kind == "refused":
        return f"computes it ({measured})"
    return measured


def findings(results: list[FrameworkResult], agreements: list[Agreement]) -> list[Finding]:
    """The results that differ, grouped by framework, dtype and what differs."""
    groups: dict[tuple[str, str, str, str], list[FrameworkResult]] = {}
    for r in results:
        if r.agrees:
            continue
        # one line per convention however many rows or errors; else per words
        what = " ".join(r.conventions) if r.conventions else r.difference
        groups.setdefault((r.framework, r.dtype, r.kind, what), []).append(r)
    out = []
    for (framework, dtype, kind, _), rs in groups.items():
        errors = [r.max_error for r in rs]
        worst = None if any(e is None for e in errors) else max(errors)
        out.append(
            Finding(
                framework,
                dtype,
                kind,
                rs[0].difference,
                rs[0].conventions,
                rs[0].declared,
                tuple(r.vector for r in rs),
                worst,
                _attnkit_words(kind, framework, dtype, agreements),
            )
        )
    return out


def frameworks_table(results: list[FrameworkResult]) -> str:
    """framework, dtype, vectors run (not applicable), agreeing, max error where they agree."""
    rows = []
    for key in dict.fromkeys((r.framework, r.dtype) for r in results):
        mine = [r for r in results if (r.framework, r.dtype) == key]
        na = sum(r.kind == "n/a" for r in mine)
        agreeing = [r.max_error for r in mine if r.kind == "agrees" and r.max_error is not None]
        ran = len(mine) - na
        rows.append(
            (
                *key,
                f"{ran}" + (f" ({na} n/a)" if na else ""),
                str(len(agreeing)),
                f"{max(agreeing):.1e}" if agreeing else "-",
                "agrees" if len(agreeing) == ran else f"{ran - len(agreeing)} differ",
            )
        )
    headers = ("framework", "dtype", "vectors", "agree", "max error where agreeing", "result")
    return table(headers, rows)


def findings_text(found: list[Finding]) -> str:
    """One paragraph-line per finding."""
    lines = []
    for f in found:
        error = "" if f.max_error is None else f", up to {f.max_error:.1e}"
        names = ", ".join(f.vectors[:4]) + (
            f", +{len(f.vectors) - 4} more" if len(f.vectors) > 4 else ""
        )
        table = ""
        if f.conventions:
            table = (
                " (as attnkit.testing's frameworks table says)"
                if f.declared
                else " (NOT what attnkit.testing's frameworks table says of it)"
            )
        lines.append(
            f"  {f.framework} in {f.dtype}: {f.what}{error}, on {len(f.vectors)} vector(s) "
            f"({names}){table}. attnkit: {f.attnkit}."
        )
    return "\n".join(lines)


def report_json(
    agreements: list[Agreement], results: list[FrameworkResult], missing: list[str]
) -> dict[str, Any]:
    """Everything verify found, as JSON-ready data."""
    return {
        "attnkit": [asdict(a) for a in agreements],
        "frameworks": [asdict(r) for r in results],
        "findings": [asdict(f) for f in findings(results, agreements)],
        "not_installed": missing,
        "passed": bool(agreements) and not any(a.failures for a in agreements),
    }
