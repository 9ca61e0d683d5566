"""The verdict lines of ``attnkit bench --backward`` and its table of results.

:func:`run` measures every job of :mod:`attnkit.app.bench.backward` (each in its own
interpreter) and judges the targets listed there: one :class:`Verdict` per target and
per backend or half of one, ``value <= bound`` meeting it; :func:`format_results` is the
table of every job's median, peak memory and dq error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ..tables import milliseconds, table
from .backward import (
    AUTO,
    FULL,
    GENERIC,
    JAX_NN,
    MEMORY_BOUND_BYTES,
    SDPA,
    SDPA_BAND,
    GradResult,
    Sizes,
    jobs,
    run_job,
)

__all__ = ["Verdict", "format_results", "run", "verdicts"]


@dataclass(frozen=True)
class Verdict:
    """One verdict line: ``value`` against ``bound`` (value <= bound meets it)."""

    target: int
    what: str
    value: float | None
    bound: float
    detail: str
    status: str  # MET, NOT MET, SKIPPED, QUICK

    def line(self) -> str:
        shown = "-" if self.value is None else f"{self.value:.3g}"
        head = f"target {self.target}  {self.what} = {shown}  (bound <= {self.bound:g})"
        return f"{head}  {self.status}  {self.detail}".rstrip()


Figure = Callable[[GradResult, GradResult | None], tuple[float, str]]


def _ratio(num: GradResult, den: GradResult | None) -> tuple[float, str]:
    assert den is not None and num.seconds is not None and den.seconds is not None
    return num.seconds / den.seconds, f"{_ms(num.seconds)} / {_ms(den.seconds)}"


def _backward_over_forward(step: GradResult, fwd: GradResult | None) -> tuple[float, str]:
    assert fwd is not None and step.seconds is not None and fwd.seconds is not None
    words = f"step {_ms(step.seconds)}, forward {_ms(fwd.seconds)}"
    return (step.seconds - fwd.seconds) / fwd.seconds, words


def _peak_gib(r: GradResult, _: GradResult | None) -> tuple[float, str]:
    peak, base = r.peak_rss_bytes, r.base_rss_bytes
    if peak is None:
        raise ValueError("no peak memory reading on this platform")
    over = "" if base is None else f"+{(peak - base) / 2**30:.2f} GiB over the inputs; "
    return peak / 2**30, f"{over}{r.seconds:.1f} s"


def _seconds(r: GradResult, _: GradResult | None) -> tuple[float, str]:
    assert r.seconds is not None
    return r.seconds, ""


def _compile_ratio(num: GradResult, den: GradResult | None) -> tuple[float, str]:
    assert den is not None and num.seconds is not None and den.seconds is not None
    return num.seconds / den.seconds, f"{num.seconds:.2f} s / {den.seconds:.2f} s"


def verdicts(
    results: list[GradResult], sizes: Sizes = FULL, *, judged: bool = True
) -> list[Verdict]:
    """One verdict line per target (and per backend or half of one), from ``results``."""
    found = {(r.job.backend, r.job.impl, r.job.kind, r.job.L, r.job.what): r for r in results}
    d, (w1, w2), W, big, (c1, c2) = sizes.dense, sizes.window, sizes.W, sizes.memory, sizes.compile
    Key = tuple[str, str, str, int, str]
    checks: list[tuple[int, str, float, Key, Key | None, Figure]] = [
        (1, f"dense L={d} torch: auto step / torch SDPA step", 1.0,
         ("torch", AUTO, "dense", d, "step"), ("torch", SDPA, "dense", d, "step"), _ratio),
        (1, f"dense L={d} torch: generic step / torch SDPA step", 1.5,
         ("torch", GENERIC, "dense", d, "step"), ("torch", SDPA, "dense", d, "step"), _ratio),
        (2, f"window {W} L={w1} torch: auto step / SDPA band-mask step", 0.05,
         ("torch", AUTO, "window", w1, "step"), ("torch", SDPA_BAND, "window", w1, "step"),
         _ratio),
        (2, f"window {W} L={w1} torch: auto backward / forward", 3.0,
         ("torch", AUTO, "window", w1, "step"), ("torch", AUTO, "window", w1, "forward"),
         _backward_over_forward),
        *[
            (3, f"window {W} {name}: step L={w2} / step L={w1}", 2.2,
             (name, AUTO, "window", w2, "step"), (name, AUTO, "window", w1, "step"), _ratio)
            for name in ("numpy", "torch", "jax")
        ],
        *[
            (4, f"dense L={big} {name}: one step's peak memory, GiB", MEMORY_BOUND_BYTES / 2**30,
             (name, AUTO, "dense", big, "memory"), None, _peak_gib)
            for name in ("torch", "jax")
        ],
        (5, f"window {W} jax: jit compile of the step at L={c2}, s", 3.0,
         ("jax", AUTO, "window", c2, "compile"), None, _seconds),
        (5, f"window {W} jax: compile L={c2} / compile L={c1}", 1.2,
         ("jax", AUTO, "window", c2, "compile"), ("jax", AUTO, "window", c1, "compile"),
         _compile_ratio),
        (5, f"window {W} jax: jit compile of the forward at L={c2}, s", 3.0,
         ("jax", AUTO, "window", c2, "compile forward"), None, _seconds),
        (5, f"window {W} jax: forward compile L={c2} / L={c1}", 1.2,
         ("jax", AUTO, "window", c2, "compile forward"),
         ("jax", AUTO, "window", c1, "compile forward"), _compile_ratio),
        (5, f"causal jax: jit compile of the step at L={c2}, s", 3.0,
         ("jax", AUTO, "causal", c2, "compile"), None, _seconds),
        (5, f"causal jax: compile L={c2} / compile L={c1}", 1.2,
         ("jax", AUTO, "causal", c2, "compile"), ("jax", AUTO, "causal", c1, "compile"),
         _compile_ratio),
        *[
            (7, f"dense L={big} {name}: one call's peak memory, GiB", MEMORY_BOUND_BYTES / 2**30,
             (name, AUTO, "dense", big, "call"), None, _peak_gib)
            for name in ("torch", "jax")
        ],
        (7, f"dense L={big}: one jax call (jit) / one torch call", 2.0,
         ("jax", AUTO, "dense", big, "call"), ("torch", AUTO, "dense", big, "call"), _ratio),
        (6, f"dense L={d}: numpy attention_vjp step / jax.nn step (jit)", 1.0,
         ("numpy", AUTO, "dense", d, "step"), ("jax", JAX_NN, "dense", d, "step"), _ratio),
    ]  # fmt: skip
    out = []
    for target, what, bound, num_key, den_key, figure in checks:
        num, den = found.get(num_key), None if den_key is None else found.get(den_key)

        def verdict(detail: str, status: str, value: float | None = None) -> Verdict:
            return Verdict(target, what, value, bound, detail, status)  # noqa: B023

        missing = [key for key, r in ((num_key, num), (den_key, den)) if key and r is None]
        failed = [r for r in (num, den) if r is not None and r.error]
        if missing:
            out.append(verdict(f"{' '.join(map(str, missing[0]))} not measured", "SKIPPED"))
        elif failed:
            status = "NOT MET" if failed[0] is num else "SKIPPED"
            out.append(verdict(f"{failed[0].job.describe()}: {failed[0].error}", status))
        else:
            assert num is not None
            try:
                value, detail = figure(num, den)
            except ValueError as exc:
                out.append(verdict(str(exc), "SKIPPED"))
                continue
            status = ("MET" if value <= bound else "NOT MET") if judged else "QUICK"
            out.append(verdict(detail, status, value))
    return out


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else milliseconds(seconds, 4)


def run(
    sizes: Sizes,
    installed: tuple[str, ...],
    *,
    judged: bool,
    repeats: int = 3,
    progress: Callable[[str], None] | None = None,
) -> tuple[list[GradResult], list[Verdict]]:
    """Every job in its own process, then the verdicts."""
    results = []
    for job in jobs(sizes, installed):
        job = replace(job, repeats=repeats)
        if progress is not None:
            progress(job.describe())
        results.append(run_job(job))
    return results, verdicts(results, sizes, judged=judged)


def format_results(results: list[GradResult]) -> str:
    """A plain table: every job's median, peak memory and dq error, or its error."""
    rows = [
        (
            r.job.backend,
            (f"window {r.job.W} " if r.job.kind == "window" else f"{r.job.kind} ") + f"L={r.job.L}",
            r.job.impl,
            r.job.what,
            "-"
            if r.seconds is None
            else (
                f"{r.seconds:.3f} s"
                if r.job.what in ("compile", "compile forward", "memory", "call")
                else _ms(r.seconds)
            ),
            "-" if r.peak_rss_bytes is None else f"{r.peak_rss_bytes / 2**30:.2f}",
            "-" if r.dq_error is None else f"{r.dq_error:.1e}",
            r.error or "",
        )
        for r in results
    ]
    headers = (
        "backend",
        "case",
        "implementation",
        "measures",
        "median",
        "peak GiB",
        "dq error",
        "",
    )
    return "\n".join(line.rstrip() for line in table(headers, rows).splitlines())
