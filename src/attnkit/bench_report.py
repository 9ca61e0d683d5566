"""``attnkit bench`` from settings to report: plan the jobs, run them, print, save, plot.

Three plans:

- default: dense at ``lengths``, window ``W`` at ``window_lengths``, one decoding step, each
  with attnkit (``impl="auto"`` and ``"generic"``) and every baseline of the backend;
- quick: the same at tiny sizes plus a small memory case, for smoke runs (ratios printed,
  not judged);
- targets: exactly the measurements PERFORMANCE.md's targets 1-8 need.

The table and the progress bar use rich when it is installed and the stream is a terminal
(``attnkit.backends.display``), plain text otherwise.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from . import __version__, backends
from .bench import (
    ATTNKIT_IMPLS,
    BATCH,
    HEAD_DIM,
    HEADS,
    HEAP_ONLY_ENV,
    WORKER_ENV,
    Case,
    Job,
    Measurement,
    baselines_for,
    run_job,
    worker_env,
)
from .bench_targets import (
    QUICK_SIZES,
    TARGET_SIZES,
    Sizes,
    TargetResult,
    checks,
    evaluate,
    jobs_for,
)

__all__ = ["Settings", "check_writable", "installed", "machine", "plan", "run"]

_DISTRIBUTIONS = ("numpy", "torch", "jax", "jaxlib", "array-api-strict", "array-api-compat")


@dataclass(frozen=True)
class Settings:
    """What to run: ``plan`` is default, quick or targets; ``isolate`` all, memory or none."""

    names: tuple[str, ...]
    plan: str = "default"
    lengths: tuple[int, ...] = (1024, 4096)
    window: int = 256
    window_lengths: tuple[int, ...] = (8192, 16384)
    repeats: int = 5
    flex: bool = False
    isolate: str = "all"
    json_path: str | None = None
    plot_path: str | None = None
    plain: bool = False
    rounds: int = 1  # the timed jobs run this many times, interleaved; the fastest counts

    @property
    def sizes(self) -> Sizes:
        """The sizes the target lines are evaluated at."""
        return QUICK_SIZES if self.plan == "quick" else TARGET_SIZES

    @classmethod
    def for_plan(cls, plan: str, names: tuple[str, ...], **given: Any) -> Settings:
        """Settings of ``plan`` with the options ``given`` (None: the plan's default)."""
        defaults: dict[str, Any] = {}
        if plan == "quick":  # the quick sizes, so that every target's ratio can print
            q = QUICK_SIZES
            defaults = dict(
                lengths=(q.dense_L, q.window_L[0]),
                window=q.W,
                window_lengths=q.window_L,
                repeats=3,
                isolate="memory",
            )
        elif plan == "targets":
            defaults = dict(rounds=3)
        chosen = {key: value for key, value in given.items() if value is not None}
        return cls(names=names, plan=plan, **{**defaults, **chosen})


def plan(s: Settings) -> list[Job]:
    """The jobs of a run, grouped by backend so that ratios are measured close in time."""
    if s.plan == "targets":
        return jobs_for(checks(TARGET_SIZES), s.names, s.repeats)
    cases = [Case("dense", L, L) for L in s.lengths]
    cases += [Case("window", L, L, s.window) for L in s.window_lengths]
    cases.append(s.sizes.decode())
    cases += [s.sizes.causal(), s.sizes.padded()]
    if s.plan == "quick":
        cases.append(s.sizes.memory())
    jobs = []
    for name in s.names:
        for case in cases:
            ours = ATTNKIT_IMPLS[:1] if case.kind == "memory" else ATTNKIT_IMPLS
            for impl in (*ours, *baselines_for(name, case.kind, flex=s.flex)):
                backward = name == "torch" and case.kind == "window" and impl == ATTNKIT_IMPLS[0]
                jobs.append(Job(name, case, impl, repeats=s.repeats, check_backward=backward))
    return jobs


def check_writable(path: str) -> str | None:
    """Why ``path`` cannot be written (checked before any benchmarking), or None."""
    p = Path(path)
    if p.is_dir():
        return f"{path} is a directory"
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        return f"the directory {parent} does not exist"
    if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        return f"{path} is not writable"
    return None


def machine() -> dict[str, Any]:
    """The machine and library versions, for the report."""
    cpu, mem = platform.processor() or platform.machine(), None
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        cpu = next(ln.split(":", 1)[1].strip() for ln in info.splitlines() if "model name" in ln)
        meminfo = Path("/proc/meminfo").read_text(encoding="utf-8").split()
        mem = int(meminfo[meminfo.index("MemTotal:") + 1]) * 1024
    except (OSError, StopIteration, ValueError):
        pass
    versions = {"python": platform.python_version(), "attnkit": __version__}
    for dist in _DISTRIBUTIONS:
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_bytes": mem,
        "platform": platform.platform(),
        "load_average": _load(),  # 1-minute load when the report is made: was it busy?
        "versions": versions,
        "worker_env": {k: v for k, v in worker_env().items() if k in WORKER_ENV},
    }


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):  # not on Windows
        return None


def _describe_machine(m: dict[str, Any]) -> str:
    mem = f", {m['memory_bytes'] / 2**30:.0f} GiB" if m["memory_bytes"] else ""
    load = f", load average {m['load_before']} before / {m['load_average']} after"
    load = load if m.get("load_before") is not None else ""
    libs = ", ".join(f"{k} {v}" for k, v in m["versions"].items())
    env = " ".join(f"{k}={v}" for k, v in m.get("worker_env", {}).items())
    heap = " ".join(f"{k}={v}" for k, v in HEAP_ONLY_ENV.items())
    env = f"\nworker processes: {env}; attnkit's window jobs (growth) also {heap}" if env else ""
    return f"{m['cpu']}, {m['cores']} cores{mem}{load}\n{libs}{env}"


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
    "first call (s)",
    "peak RSS (MiB)",
    "+RSS (MiB)",
    "max err",
    "note",
)


def _plot(path: str, results: list[Measurement], title: str) -> None:
    from .backends import display

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
    from .backends import display

    jobs = plan(s)
    load_before = _load()
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
                m = run_job(job, isolated=isolated)
                rounds.setdefault(i, []).append(m)
                progress.done(what, _summary(m))
    results = [_fastest(rounds[i]) for i in range(len(jobs))]
    info = {**machine(), "load_before": load_before}
    verdicts = evaluate(checks(s.sizes), results, selected=s.names, judged=s.plan != "quick")
    title = f"attnkit bench ({s.plan}): batch {BATCH}, {HEADS} heads, head size {HEAD_DIM}, float32"
    print(f"\n{title}\n{_describe_machine(info)}\n")
    rows = [_row(m) for m in results]
    if fancy and sys.stdout.isatty():
        display.print_rich_table("time and memory per implementation", _HEADERS, rows)
    else:
        from .cli import _table

        print(_table(_HEADERS, rows))
    print("\nPERFORMANCE.md targets (ratios measured in this run):")
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


def _fastest(tries: list[Measurement]) -> Measurement:
    """The round with the lowest median (the machine is shared: noise only ever adds
    time), with the highest peak memory of all rounds; a failed round wins, so that no
    error is hidden."""
    failed = [m for m in tries if m.error or m.seconds is None]
    if failed:
        return failed[0]
    best = min(tries, key=lambda m: m.seconds or 0.0)
    peaks = [m.peak_rss_bytes for m in tries if m.peak_rss_bytes is not None]
    if not peaks or best.peak_rss_bytes is None:
        return best
    worst = max(tries, key=lambda m: m.peak_rss_bytes or 0)
    return replace(best, peak_rss_bytes=worst.peak_rss_bytes, base_rss_bytes=worst.base_rss_bytes)


def installed(names: tuple[str, ...]) -> tuple[tuple[str, ...], list[str]]:
    """(the installed backends of ``names``, "name: install hint" for the others)."""
    ok = tuple(n for n in names if backends.load(n).available())
    missing = [f"{n}: {backends.load(n).install_hint}" for n in names if n not in ok]
    return ok, missing
