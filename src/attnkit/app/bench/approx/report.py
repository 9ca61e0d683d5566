"""``attnkit bench --approx`` from settings to report: errors, timings, tables, JSON.

Errors are computed in this process on the first selected backend (float32, every input
kind of :mod:`attnkit.app.bench.approx.inputs`; :mod:`attnkit.app.bench.approx.errors`);
timings run one job per process on every selected backend
(:func:`attnkit.app.bench.approx.worker.run_job`). The report prints an error table
(method x input kind x L), a time and memory table per backend, and one line per linear
method with time(L) / time(L/2) at the largest L against the bound 2.2.
"""

from __future__ import annotations

import json
import math
import sys
import textwrap
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from attnkit import __version__, backends

from ...tables import not_installed, table
from ..machine import machine
from ..settings import check_writable, installed
from .cases import (
    GROWTH_BOUND,
    QUICK,
    TIMING_INPUTS,
    ApproxJob,
    ApproxMeasurement,
    Method,
    Sizes,
    methods,
)
from .errors import ErrorResult, measure_errors
from .inputs import INPUT_KINDS, describe
from .worker import run_job

__all__ = ["ApproxSettings", "command", "growth_lines", "plan", "run"]

#: ``attnkit bench`` options that do not apply to ``--approx``.
_EXCLUDES = ("targets", "window_lengths", "flex", "plot", "hf")


@dataclass(frozen=True)
class ApproxSettings:
    names: tuple[str, ...]
    sizes: Sizes = field(default_factory=Sizes)
    repeats: int = 3
    isolate: bool = True
    json_path: str | None = None
    quick: bool = False

    @classmethod
    def make(cls, names: tuple[str, ...], *, quick: bool, **given: Any) -> ApproxSettings:
        sizes = QUICK if quick else Sizes()
        if given.get("lengths"):
            sizes = Sizes(tuple(given["lengths"]), sizes.params, sizes.window)
        if given.get("window"):
            sizes = Sizes(sizes.lengths, sizes.params, given["window"])
        repeats = given.get("repeats") or (1 if quick else 3)
        # Quick runs stay in this process unless asked (a worker per job costs seconds).
        isolate = (given.get("isolate") or ("none" if quick else "all")) != "none"
        return cls(names, sizes, repeats, isolate, given.get("json_path"), quick)


def plan(s: ApproxSettings) -> list[ApproxJob]:
    """Per backend and method: a timing job at every length, then a growth job."""
    half, top = s.sizes.growth
    jobs = []
    for name in s.names:
        for method in methods(s.sizes):
            lengths = [L for L in s.sizes.lengths if method.param is None or method.param <= L]
            jobs += [ApproxJob(name, method, L, repeats=s.repeats) for L in lengths]
            if method.param is None or method.param <= half:
                rounds, sample_s = (5, 0.01) if s.quick else (max(7, s.repeats), 0.1)
                growth = ApproxJob(name, method, top, rounds, growth_of=half, sample_s=sample_s)
                jobs.append(growth)
    return jobs


def _growth_of(timings: list[ApproxMeasurement]) -> dict[tuple[str, Method], ApproxMeasurement]:
    return {(m.job.backend, m.job.method): m for m in timings if m.job.growth_of is not None}


def growth_lines(s: ApproxSettings, timings: list[ApproxMeasurement]) -> list[dict[str, Any]]:
    """time(L) / time(L/2) at the largest L for every method and backend."""
    half, top = s.sizes.growth
    found = _growth_of(timings)
    out = []
    for name in s.names:
        for method in methods(s.sizes):
            m = found.get((name, method))
            entry: dict[str, Any] = {"backend": name, "method": method.label, "value": None}
            if m is None or m.ratio is None:
                entry["status"] = f"SKIPPED ({m.error if m is not None else 'not measured'})"
            else:
                entry["value"] = m.ratio
                entry["ratios"] = m.ratios
                entry["fastest_ms"] = [1e3 * min(m.short_samples or [math.nan]),
                                       1e3 * min(m.samples or [math.nan])]  # fmt: skip
                if not method.linear:
                    entry["status"] = "quadratic: not judged"
                elif s.quick:
                    entry["status"] = "QUICK (tiny sizes: not judged)"
                else:
                    entry["status"] = "MET" if m.ratio <= GROWTH_BOUND else "NOT MET"
            value = "-" if entry["value"] is None else f"{entry['value']:.2f}"
            bound = f"  (bound <= {GROWTH_BOUND})" if method.linear else ""
            entry["line"] = (
                f"linear growth  {name}  {method.label}  time(L={top}) / time(L={half}) = "
                f"{value}{bound}  {entry['status']}"
            )
            out.append(entry)
    return out


def _fmt_error(r: ErrorResult | None) -> str:
    if r is None:
        return "-"
    if r.error is None:
        return "skipped" if r.note.startswith("skipped") else "failed"
    return "0 (ref)" if r.method.name == "exact dense" else f"{r.error:.3g}"


def _tables(s: ApproxSettings, errors: list[ErrorResult], timings: list[ApproxMeasurement]):
    lengths = s.sizes.lengths
    found = {(r.kind, r.method, r.L): r for r in errors}
    headers = ["method", *(f"{kind} L={L}" for kind in INPUT_KINDS for L in lengths)]
    rows = [
        [m.label, *(_fmt_error(found.get((kind, m, L))) for kind in INPUT_KINDS for L in lengths)]
        for m in methods(s.sizes)
    ]
    text = [table(headers, rows)]
    half, top = s.sizes.growth
    timed = {(t.job.backend, t.job.method, t.job.L): t for t in timings if t.job.growth_of is None}
    growth = _growth_of(timings)
    for name in s.names:
        headers = ["method", *(f"ms L={L}" for L in lengths), *(f"MiB L={L}" for L in lengths)]
        headers.append(f"L={top}/L={half}")
        rows = []
        for m in methods(s.sizes):
            cells = [timed.get((name, m, L)) for L in lengths]
            ms = [
                "-" if c is None or c.seconds is None else f"{1000 * c.seconds:.4g}" for c in cells
            ]
            mib = [
                "-" if c is None or c.extra_bytes is None else f"{c.extra_bytes / 2**20:.0f}"
                for c in cells
            ]
            g = growth.get((name, m))
            rows.append(
                [m.label, *ms, *mib, "-" if g is None or g.ratio is None else f"{g.ratio:.2f}"]
            )
        title = f"{name}: time (median, ms) and peak memory over the inputs (MiB)"
        text.append(f"{title}\n{table(headers, rows)}")
    return text


def run(s: ApproxSettings) -> int:
    """Measure, print the report, write the JSON; 1 if an attnkit computation failed."""
    errors = measure_errors(s.names, s.sizes)
    jobs = plan(s)
    timings = []
    for i, job in enumerate(jobs, 1):
        print(f"[{i}/{len(jobs)}] {job.describe()} ...", file=sys.stderr, flush=True)
        timings.append(run_job(job, isolated=s.isolate))
    lines = growth_lines(s, timings)
    info, kinds = machine(), describe()
    _print_report(s, errors, timings, lines, info, kinds)
    if s.json_path:
        report = {
            "attnkit": __version__,
            "machine": info,
            "settings": asdict(s),
            "inputs": kinds,
            "errors": [asdict(r) for r in errors],
            "timings": [t.to_json() for t in timings],
            "growth": lines,
        }
        Path(s.json_path).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        print(f"\nwrote {s.json_path}")
    failed = [f"{t.job.describe()}: {t.error}" for t in timings if t.error]
    failed += [
        f"error on {r.kind} {r.method.label} L={r.L}: {r.note}"
        for r in errors
        if r.note and not r.note.startswith("skipped")
    ]
    if failed:
        print(f"\nerror: {len(failed)} measurement(s) failed:", file=sys.stderr)
        print("\n".join(f"  {line}" for line in failed), file=sys.stderr)
    return 1 if failed else 0


def _print_report(
    s: ApproxSettings,
    errors: list[ErrorResult],
    timings: list[ApproxMeasurement],
    lines: list[dict[str, Any]],
    info: dict[str, Any],
    kinds: dict[str, str],
) -> None:
    def say(text: str, indent: str = "") -> None:  # prose wrapped at 100 columns
        print(textwrap.fill(text, 100, initial_indent=indent, subsequent_indent=indent + "  "))

    versions = ", ".join(f"{k} {v}" for k, v in info["versions"].items())
    print(f"\nattnkit bench --approx ({'quick' if s.quick else 'full'})")
    say(f"{info['cpu']}, {info['cores']} cores; {versions}")
    say("worker processes: the caller's environment (no allocator tuning)")
    print()
    say(
        f"Relative Frobenius error of the output against exact attention ({s.names[0]}, "
        "float32; performer causal against exact causal attention), on inputs:"
    )
    for kind in INPUT_KINDS:
        say(f"{kind}: {kinds[kind]}", "  ")
    tables = _tables(s, errors, timings)
    print(f"\n{tables[0]}\n")
    say(
        f"Time and memory on {TIMING_INPUTS}; time is the median of the calls after a "
        "warm-up, memory the job process's peak resident memory during the calls over what it "
        "held just before them ('-' when not isolated: --isolate all); the last column is the "
        "fastest time at the largest L over the fastest at half of it, the two timed "
        "alternately."
    )
    for text in tables[1:]:
        print(f"\n{text}")
    print("\nLinear growth (time at the largest L over half of it):")
    print("\n".join(entry["line"] for entry in lines))


def command(args: Any) -> int:
    """``attnkit bench --approx`` from the parsed command line (``args.parser`` refuses)."""
    given = [f"--{name.replace('_', '-')}" for name in _EXCLUDES if getattr(args, name, None)]
    if given:
        args.parser.error(
            f"--approx measures attnkit.approx against exact attention; drop {', '.join(given)}"
        )
    why = check_writable(args.json) if args.json else None
    if why:
        args.parser.error(f"cannot write the --json file: {why}")
    names, missing = installed(tuple(dict.fromkeys(args.backend or backends.NAMES)))
    not_installed(missing, sys.stderr)
    if not names:
        print("error: no selected backend is installed.", file=sys.stderr)
        return 1
    settings = ApproxSettings.make(
        names,
        quick=args.quick,
        lengths=args.lengths,
        window=args.window,
        repeats=args.repeats,
        isolate=args.isolate,
        json_path=args.json,
    )
    return run(settings)
