"""One ``attnkit bench --approx`` job measured here and now: its time and peak memory.

Timings run on random inputs with ``attnkit bench``'s timing loop; memory is the peak
resident memory during the calls over what the process held just before them. Growth
jobs time the two lengths alternately (:func:`measure`).
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any

from attnkit import backends

from ..cases import Case, bench_tools, random_inputs
from ..measure import peak_rss_bytes, timed
from .cases import ApproxJob, ApproxMeasurement, make_call

__all__ = ["measure"]


def measure(job: ApproxJob) -> ApproxMeasurement:
    """Time ``job`` here and now; a failure gives an ``error``, never raises."""
    try:
        adapter, tools = backends.load(job.backend), bench_tools(job.backend)
        jit = getattr(tools, "jit", None)

        def build(L: int) -> Any:
            host = random_inputs(Case("dense", L, L), job.seed)  # NumPy (B, H, L, E) float32
            q, k, v = (adapter.from_numpy(a, "float32") for a in host)
            return make_call(job.method, q, k, v, seed=job.seed, jit=jit)

        if job.growth_of is not None:
            return _growth(job, adapter, build(job.growth_of), build(job.L))
        start = time.perf_counter()
        call = build(job.L)
        base = _reset_peak_rss() or peak_rss_bytes()
        adapter.synchronize(call())  # warm-up: compilation, allocator
        first = time.perf_counter() - start
        _, samples, _ = timed(call, adapter, job.repeats)
        return ApproxMeasurement(
            job,
            seconds=statistics.median(samples),
            samples=samples,
            first_call_s=first,
            base_rss_bytes=base,
            peak_rss_bytes=peak_rss_bytes(),
        )
    except Exception as exc:  # report any failure of the measured code, keep benchmarking
        return ApproxMeasurement(job, error=f"{type(exc).__name__}: {exc}".strip())


def _reset_peak_rss() -> int | None:
    """Reset this process's peak resident memory to the current one and return it.

    Linux keeps the high-water mark ``VmHWM`` across frees, so temporaries of the input
    conversion would hide the working memory of the computation; writing 5 to
    ``/proc/self/clear_refs`` resets it. None where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
            refs.write("5")
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def _per_call(call: Any, adapter: Any, min_s: float) -> float:
    """Seconds per call, over enough calls to last ``min_s``."""
    start = time.perf_counter()
    adapter.synchronize(call())
    once = time.perf_counter() - start
    if once >= min_s:
        return once
    n = math.ceil(min_s / max(once, 1e-7))
    start = time.perf_counter()
    for _ in range(n):
        adapter.synchronize(call())
    return (time.perf_counter() - start) / n


def _growth(job: ApproxJob, adapter: Any, short: Any, long: Any) -> ApproxMeasurement:
    """time(long) / time(short), the two timed alternately (one sample each per round)."""
    for call in (short, long):
        adapter.synchronize(call())  # warm-up
    ratios, samples, shorts = [], [], []
    for _ in range(job.repeats):
        t_short = _per_call(short, adapter, job.sample_s)
        t_long = _per_call(long, adapter, job.sample_s)
        ratios.append(t_long / t_short)
        samples.append(t_long)
        shorts.append(t_short)
    return ApproxMeasurement(
        job,
        seconds=statistics.median(samples),
        samples=samples,
        ratios=ratios,
        short_samples=shorts,
    )
