"""``attnkit bench`` from settings to report: run the plan, print, save, plot.

Every timed job runs :data:`Settings.rounds` times (more where a target asks,
``Check.min_rounds``), the rounds interleaved; each job's median over its rounds counts,
and the table shows the spread (the fastest and slowest round, or sample). The
table and the progress bar use rich when it is installed and the stream is a terminal
(:mod:`attnkit.app.display`), plain text otherwise.
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import asdict, replace
from pathlib import Path

from attnkit import __version__

from ..tables import table
from .cases import BATCH, HEAD_DIM, HEADS, Measurement
from .machine import describe_machine, load_average, machine
from .settings import Settings, plan
from .targets import TargetResult, checks, evaluate
from .worker import run_job

__all__ = ["run"]


class _PlainProgress:
    """Progress as plain lines on stderr."""

    def __init__(self, total: int) -> None:
        self.total, self.count = total, 0

    def __enter__(self) -> _PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def start(self, description: str) -> None:
        self.count += 1
        print(f"[{self.count}/{self.total}] {description} ...", end="", file=sys.stderr, flush=True)

    def done(self, description: str, outcome: str) -> None:
        print(f" {outcome}", file=sys.stderr, flush=True)


def _spread(m: Measurement) -> str:
    """min-max per call over the rounds (over the samples when there was one round)."""
    values = m.rounds if len(m.rounds) > 1 else m.samples
    if m.seconds is None or not values:
        return "-"
    return f"{1000 * min(values):.4g}-{1000 * max(values):.4g}"


def _summary(m: Measurement) -> str:
    return m.error if m.error else f"{1000 * (m.seconds or 0.0):.4g} ms"


def _row(m: Measurement) -> list[str]:
    def mib(x: float | None) -> str:
        return "-" if x is None else f"{x / 2**20:.0f}"

    grown = None
    if m.peak_rss_bytes is not None and m.base_rss_bytes is not None:
        grown = m.peak_rss_bytes - m.base_rss_bytes
    note = m.error or ""
    if m.backward_s is not None or m.backward_error:
        note = m.backward_error or f"forward+backward {m.backward_s:.3f} s"
    return [
        m.job.backend,
        m.job.case.describe(),
        m.job.impl,
        "-" if m.seconds is None else f"{1000 * m.seconds:.4g}",
        _spread(m),
        "-" if m.first_call_s is None else f"{m.first_call_s:.2f}",
        mib(m.peak_rss_bytes),
        mib(grown),
        "-" if m.max_error is None else f"{m.max_error:.1e}",
        note,
    ]


_HEADERS = (
    "backend",
    "case",
    "implementation",
    "median (ms)",
    "spread (ms)",
    "first call (s)",
    "peak RSS (MiB)",
    "+RSS (MiB)",
    "max err",
    "note",
)


def _plot(path: str, results: list[Measurement], title: str) -> None:
    from .. import display

    panels: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for m in results:
        case = m.job.case
        if m.seconds is None or case.kind not in ("dense", "window"):
            continue
        panel = "dense" if case.kind == "dense" else f"window {case.W}"
        label = f"{m.job.backend}: {m.job.impl}"
        panels.setdefault(panel, {}).setdefault(label, []).append((case.L, m.seconds))
    display.plot_times(path, panels or {"no timings": {}}, title)


def run(s: Settings) -> tuple[list[Measurement], list[TargetResult]]:
    """Run the plan with a progress display, print the table and the target lines, save."""
    from .. import display

    jobs = plan(s)
    load_before = load_average()
    fancy = not s.plain and display.has_rich()
    progress_cls = display.RichProgress if fancy and sys.stderr.isatty() else _PlainProgress
    # the memory case is one call: measured once; a job may ask for more rounds
    counts = [1 if j.case.kind == "memory" else max(s.rounds, j.min_rounds) for j in jobs]
    rounds: dict[int, list[Measurement]] = {}
    with progress_cls(sum(counts)) as progress:
        for r in range(max(counts, default=0)):
            for i, job in enumerate(jobs):
                if r >= counts[i]:
                    continue
                n = counts[i]
                what = job.describe() + (f"  (round {r + 1}/{n})" if n > 1 else "")
                progress.start(what)
                kind = job.case.kind
                isolated = s.isolate == "all" or (s.isolate == "memory" and kind == "memory")
                m = run_job(job, isolated=isolated, tuned=s.tuned_env)
                rounds.setdefault(i, []).append(m)
                progress.done(what, _summary(m))
    results = [_median_round(rounds[i]) for i in range(len(jobs))]
    info = {**machine(tuned=s.tuned_env), "load_before": load_before}
    verdicts = evaluate(checks(s.sizes), results, selected=s.names, judged=s.plan != "quick")
    title = f"attnkit bench ({s.plan}): batch {BATCH}, {HEADS} heads, head size {HEAD_DIM}, float32"
    print(f"\n{title}\n{describe_machine(info)}\n")
    rows = [_row(m) for m in results]
    if fancy and sys.stdout.isatty():
        display.print_rich_table("time and memory per implementation", _HEADERS, rows)
    else:
        print(table(_HEADERS, rows))
    if s.plan == "quick":
        print(
            "\nSmoke run at tiny sizes: no target is judged and no ratio is printed (at these "
            "sizes fixed costs dominate and the ratios say nothing about the targets); run "
            "attnkit bench --targets for them."
        )
    else:
        kept = "median of rounds" if max(counts, default=1) > 1 else "median of samples"
        env = "tuned allocator (--tuned-env)" if s.tuned_env else "default environment"
        print(f"\nPerformance targets (ratios measured in this run; {kept}, {env}):")
        print("\n".join(v.line() for v in verdicts))
    if s.json_path:
        report = {
            "attnkit": __version__,
            "machine": info,
            "settings": asdict(s),
            "measurements": [{"case_label": m.job.case.describe(), **m.to_json()} for m in results],
            "targets": [v.to_json() for v in verdicts],
        }
        Path(s.json_path).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        print(f"\nwrote {s.json_path}")
    if s.plot_path:
        _plot(s.plot_path, results, title)
        print(f"wrote {s.plot_path}")
    return results, verdicts


def _median_round(tries: list[Measurement]) -> Measurement:
    """One measurement for a job's rounds: the median of the rounds' medians (what a
    user typically gets; the spread is kept in ``rounds``), the highest peak memory of
    all rounds; a failed round wins, so that no error is hidden."""
    failed = [m for m in tries if m.error or m.seconds is None]
    if failed:
        return failed[0]
    if len(tries) == 1:
        return tries[0]
    times = [m.seconds or 0.0 for m in tries]
    middle = sorted(tries, key=lambda m: m.seconds or 0.0)[(len(tries) - 1) // 2]
    worst = max(tries, key=lambda m: m.peak_rss_bytes or 0)
    return replace(
        middle,
        seconds=statistics.median(times),
        rounds=times,
        peak_rss_bytes=worst.peak_rss_bytes,
        base_rss_bytes=worst.base_rss_bytes,
    )
