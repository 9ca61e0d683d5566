"""``attnkit bench --forms``: every call form as one loop, measured against its targets.

Each job runs in a fresh interpreter (``python -m attnkit.app.bench.forms``: its own
compile caches and memory). The targets (issue "every call form runs as one loop"), at
the full sizes (``--quick`` divides every length by 16 and judges nothing)::

    1  JAX compile of forward+backward, L=16384 / L=4096 <= 1.2 for padded causal,
       alibi causal and segments causal (and <= 3 s at 16384)
    2  JAX run time at L=8192, attnkit / jax.nn <= 1 (padded causal) and / tokamax
       xla_chunked <= 1 (padded causal, softcap causal; where tokamax is installed)
    3  one dense JAX call at L=32768 / (64 x the call at L=4096) <= 1.3
    4  torch.compile(fullgraph=True) of a window-256 call at L=8192 / the call eager <= 1;
       its first call (the compile) <= 10 s; compile at 16384 / at 4096 <= 1.2
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from .child import print_result, run_module

__all__ = ["FULL", "QUICK", "FormJob", "FormResult", "Sizes", "jobs", "run", "verdicts"]

_MARK = "attnkit-bench-forms "
COMPILED_FORMS = ("padded causal", "alibi causal", "segments causal")
TIMED = (
    ("padded causal", "jax.nn.dot_product_attention"),
    ("padded causal", "tokamax xla_chunked"),
    ("softcap causal", "tokamax xla_chunked"),
)


@dataclass(frozen=True)
class FormJob:
    """One measurement: ``what`` is "compile" (JAX forward+backward, seconds, the median
    of three from cleared caches), "forward"
    (JAX, seconds per call), "call" (one dense JAX call after a warm-up), "torch compile"
    (the first compiled call) or "torch window" (compiled and eager calls)."""

    what: str
    form: str
    L: int
    impl: str = "attnkit"
    repeats: int = 5
    W: int = 256


@dataclass
class FormResult:
    job: FormJob
    samples: list[float] = field(default_factory=list)
    eager: list[float] = field(default_factory=list)
    error: str | None = None

    @property
    def seconds(self) -> float | None:
        return statistics.median(self.samples) if self.samples else None


@dataclass(frozen=True)
class Sizes:
    compile: tuple[int, int] = (4096, 16384)
    timed: int = 8192
    dense: tuple[int, int] = (4096, 32768)
    window: tuple[int, int, int] = (4096, 8192, 16384)
    W: int = 256


FULL = Sizes()
QUICK = Sizes(compile=(256, 1024), timed=512, dense=(256, 2048), window=(256, 512, 1024), W=32)


def jobs(sizes: Sizes = FULL, names: tuple[str, ...] = ("jax", "torch")) -> list[FormJob]:
    out: list[FormJob] = []
    if "jax" in names:
        out += [FormJob("compile", form, L) for form in COMPILED_FORMS for L in sizes.compile]
        forms = dict.fromkeys(form for form, _ in TIMED)
        out += [FormJob("forward", form, sizes.timed) for form in forms]
        out += [FormJob("forward", form, sizes.timed, impl) for form, impl in TIMED]
        out += [FormJob("call", "dense", L, repeats=1) for L in sizes.dense]
    if "torch" in names:
        out += [FormJob("torch compile", "window", L, W=sizes.W) for L in sizes.window]
        out.append(FormJob("torch window", "window", sizes.window[1], W=sizes.W))
    return out


def measure(job: FormJob) -> FormResult:
    """Run ``job`` here; a failure (a peer not installed included) gives an ``error``."""
    try:
        if job.what.startswith("torch"):
            from . import forms_torch as tf

            if job.what == "torch compile":
                return FormResult(job, [tf.compile_first_call(job.L, job.W)])
            times = tf.window_times(job.L, job.W, job.repeats)
            return FormResult(job, times["compiled"], times["eager"])
        from . import forms_jax as jf

        fn, args = jf.setup(job.form, job.L, job.impl)
        if job.what == "compile":
            return FormResult(job, jf.compile_seconds(fn, args, grad=True, repeats=3))
        return FormResult(job, jf.forward_seconds(fn, args, job.repeats))
    except Exception as exc:  # report, keep benchmarking
        return FormResult(job, error=f"{type(exc).__name__}: {exc}"[:300])


def run_job(job: FormJob, timeout_s: float = 3600.0) -> FormResult:
    data, why = run_module("attnkit.app.bench.forms", _MARK, asdict(job), timeout_s=timeout_s)
    if why:
        return FormResult(job, error=why)
    return FormResult(job, data["samples"], data["eager"], data["error"])


def run(
    sizes: Sizes, names: tuple[str, ...], progress: Callable[[str], None] | None = None
) -> list[FormResult]:
    results = []
    for job in jobs(sizes, names):
        if progress:
            progress(f"{job.what} {job.form} L={job.L} {job.impl}")
        results.append(run_job(job))
    return results


def _find(results: list[FormResult], **want: object) -> FormResult | None:
    for r in results:
        if all(getattr(r.job, k) == v for k, v in want.items()):
            return r
    return None


def _line(n: int, what: str, value: float | None, bound: float, judged: bool, why: str) -> str:
    if value is None:
        return f"target forms {n}  {what}: SKIPPED ({why})"
    verdict = ("MET" if value <= bound else "NOT MET") if judged else "(not judged)"
    return f"target forms {n}  {what} = {value:.3f}  (bound <= {bound:g})  {verdict}"


def verdicts(results: list[FormResult], sizes: Sizes, judged: bool) -> list[str]:
    """The verdict lines of the module docstring's targets, from ``results``."""
    lines = []
    small, large = sizes.compile
    for form in COMPILED_FORMS:
        a = _find(results, what="compile", form=form, L=small)
        b = _find(results, what="compile", form=form, L=large)
        ok = a and b and a.seconds and b.seconds
        why = (a and a.error) or (b and b.error) or "not measured"
        value = b.seconds / a.seconds if ok else None
        lines.append(_line(1, f"jax {form} fwd+bwd compile L={large} / L={small}", value, 1.2,
                           judged, why))  # fmt: skip
        value = b.seconds if ok else None
        lines.append(_line(1, f"jax {form} fwd+bwd compile L={large}, s", value, 3.0, judged, why))
    for form, peer in TIMED:
        a = _find(results, what="forward", form=form, impl="attnkit")
        b = _find(results, what="forward", form=form, impl=peer)
        ok = a and b and a.seconds and b.seconds
        why = (b and b.error) or (a and a.error) or "not measured"
        value = a.seconds / b.seconds if ok else None
        lines.append(_line(2, f"jax {form} L={sizes.timed} attnkit / {peer}", value, 1.0, judged,
                           why))  # fmt: skip
    small, large = sizes.dense
    a, b = (_find(results, what="call", form="dense", L=L) for L in (small, large))
    scale = (large / small) ** 2
    ok = a and b and a.seconds and b.seconds
    value = b.seconds / (scale * a.seconds) if ok else None
    why = (b and b.error) or (a and a.error) or "not measured"
    lines.append(_line(3, f"jax dense call L={large} / ({scale:g} x L={small})", value, 1.3,
                       judged, why))  # fmt: skip
    w = _find(results, what="torch window")
    ok = w and w.samples and w.eager
    value = statistics.median(w.samples) / statistics.median(w.eager) if ok else None
    why = (w and w.error) or "torch not measured"
    lines.append(_line(4, f"torch.compile window {sizes.W} L={sizes.window[1]} / eager", value,
                       1.0, judged, why))  # fmt: skip
    first = _find(results, what="torch compile", L=sizes.window[1])
    value = first.seconds if first and first.seconds else None
    lines.append(_line(4, f"torch.compile window first call L={sizes.window[1]}, s", value, 10.0,
                       judged, (first and first.error) or "not measured"))  # fmt: skip
    a, b = (_find(results, what="torch compile", L=L) for L in (sizes.window[0], sizes.window[2]))
    ok = a and b and a.seconds and b.seconds
    value = b.seconds / a.seconds if ok else None
    lines.append(_line(4, f"torch.compile window compile L={sizes.window[2]} / "
                          f"L={sizes.window[0]}", value, 1.2, judged,
                       (a and a.error) or (b and b.error) or "not measured"))  # fmt: skip
    return lines


def format_results(results: list[FormResult]) -> str:
    rows = []
    for r in results:
        j = r.job
        shown = "-" if r.seconds is None else f"{r.seconds:.4g} s"
        eager = f"  (eager {statistics.median(r.eager):.4g} s)" if r.eager else ""
        rows.append(f"  {j.what:<14} {j.form:<16} L={j.L:<6} {j.impl:<30} {shown}{eager}"
                    + (f"  FAILED {r.error}" if r.error else ""))  # fmt: skip
    return "\n".join(rows)


def main() -> int:
    """``python -m attnkit.app.bench.forms``: one job as JSON on stdin, its result out."""
    job = FormJob(**json.loads(sys.stdin.read()))
    r = measure(job)
    print_result(_MARK, {"samples": r.samples, "eager": r.eager, "error": r.error})
    return 0


if __name__ == "__main__":
    sys.exit(main())
