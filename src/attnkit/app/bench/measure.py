"""One ``attnkit bench`` job measured here and now: its time, peak memory and error.

Each job draws its inputs, warms up (jit compiles, allocator), then takes the median of
``repeats`` timed samples, synchronizing after every call; a sample repeats the call
until it lasts 10 ms. The last result is checked against the float64 formula on a few
query rows, so a wrong computation reports an error instead of a time. Peak memory is
the operating system's resident high-water mark (``VmHWM``; ``ru_maxrss`` elsewhere),
hence one job per interpreter (:mod:`attnkit.app.bench.worker`). Framework code lives in
the ``peers_*`` modules; this module imports no framework.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from attnkit import backends, scaled_dot_product_attention

from .cases import (
    ATTNKIT_IMPLS,
    BATCH,
    HEAD_DIM,
    HEADS,
    Case,
    Job,
    Measurement,
    bench_tools,
    random_inputs,
)

__all__ = [
    "MIN_SAMPLE_S",
    "SCORE_CAP_BYTES",
    "TOLERANCE",
    "measure",
    "peak_rss_bytes",
    "timed",
]

#: Largest float32 (B, H, L, S) score matrix a baseline in its backend's ``MATERIALIZING``
#: may build; larger cases are skipped with the reason (the machines are shared).
SCORE_CAP_BYTES = 4 * 2**30
#: Largest |result - float64 reference| accepted on the checked rows (float32 inputs).
TOLERANCE = 1e-3
#: A timed sample repeats the call until it lasts at least this long (seconds).
MIN_SAMPLE_S = 0.01


def peak_rss_bytes() -> int | None:
    """This process's peak resident memory so far, from the operating system.

    On Linux this is ``VmHWM`` from ``/proc/self/status``: ``getrusage``'s ``ru_maxrss``
    there carries the parent's peak across fork and exec, so a worker started by a large
    benchmark process would report the parent's size. Elsewhere, ``ru_maxrss``.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource
    except ImportError:  # not on Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024  # Linux: KiB


def measure(job: Job) -> Measurement:
    """Run ``job`` here and now; a failing implementation gives an ``error``, never raises."""
    try:
        return _measure(job)
    except Exception as exc:  # report any failure of the measured code, keep benchmarking
        return Measurement(job, error=f"{type(exc).__name__}: {exc}".strip())


def _measure(job: Job) -> Measurement:
    case, adapter, tools = job.case, backends.load(job.backend), bench_tools(job.backend)
    if job.impl in getattr(tools, "MATERIALIZING", ()):
        scores = 4 * BATCH * HEADS * case.L * case.S
        if scores > SCORE_CAP_BYTES:
            return Measurement(
                job,
                error=f"skipped: would hold a {scores / 2**30:.0f} GiB score matrix "
                f"(cap {SCORE_CAP_BYTES / 2**30:.0f} GiB)",
            )
    host = random_inputs(case, job.seed)
    q, k, v = (adapter.from_numpy(a, "float32") for a in host)
    keep = case.padding()
    mask = None if keep is None else adapter.from_numpy(keep, "bool")
    base_rss = peak_rss_bytes()
    start = time.perf_counter()
    attend: Callable[..., Any] | None = None
    if job.impl in ATTNKIT_IMPLS:
        impl, window = job.impl.split()[-1], case.window

        def attend(q: Any, k: Any, v: Any) -> Any:
            return scaled_dot_product_attention(
                q, k, v, mask, window=window, is_causal=case.causal, impl=impl
            )

        # under jax.jit too for the memory call: its blocks are one loop (jax.lax.scan)
        compiled = attend if tools is None else tools.jit(attend)

        def call() -> Any:
            return compiled(q, k, v)

    else:
        if tools is None:
            raise ValueError(f"backend {job.backend} has no baseline {job.impl!r}")
        call = tools.build(
            job.impl, q, k, v, window=case.window, scale=HEAD_DIM**-0.5, causal=case.causal,
            mask=mask,
        )  # fmt: skip
    result = call()  # warm-up: jit compiles, allocator
    adapter.synchronize(result)
    first = time.perf_counter() - start
    if case.kind == "memory":
        samples, calls = [first], 1
    else:
        result, samples, calls = timed(call, adapter, job.repeats)
    peak = peak_rss_bytes()
    error = _max_error(adapter.to_numpy(result), host, case)
    m = Measurement(
        job,
        seconds=statistics.median(samples),
        samples=samples,
        calls_per_sample=calls,
        first_call_s=first,
        base_rss_bytes=base_rss,
        peak_rss_bytes=peak,
        max_error=error,
    )
    if not error <= TOLERANCE:  # also catches NaN
        m.error = f"wrong result: differs from float64 by {error:.2e} (> {TOLERANCE:g})"
    elif job.check_backward and attend is not None:
        try:
            m.backward_s = _forward_backward(tools, attend, q, k, v)
        except Exception as exc:  # the forward time stands; the backward verdict fails
            m.backward_error = f"{type(exc).__name__}: {exc}"
    return m


#: Warm-up calls before the samples (besides the first, timed apart), within WARMUP_S:
#: the first calls of a process run slower (about 1.5x for a window at L = 8192 on
#: PyTorch) while the allocator's heap grows and its pages are first touched.
WARMUP_CALLS, WARMUP_S = 5, 1.0


def timed(call: Callable[[], Any], adapter: Any, repeats: int) -> tuple[Any, list[float], int]:
    """(last result, per-call seconds of each of ``repeats`` samples, calls per sample).

    ``adapter.synchronize`` waits for each result; after a warm-up, a sample repeats the
    call until it lasts :data:`MIN_SAMPLE_S`."""

    def run(n: int) -> tuple[Any, float]:
        start = time.perf_counter()
        for _ in range(n):
            result = call()
            adapter.synchronize(result)
        return result, (time.perf_counter() - start) / n

    result, once = run(1)
    warm_until = time.perf_counter() + WARMUP_S
    for _ in range(WARMUP_CALLS):  # the allocator's heap and huge pages settle first
        if time.perf_counter() > warm_until:
            break
        result, once = run(1)
    calls = 1 if once >= MIN_SAMPLE_S else math.ceil(MIN_SAMPLE_S / max(once, 1e-7))
    samples = []
    while len(samples) < repeats:
        result, seconds = run(calls)
        samples.append(seconds)
    return result, samples, calls


def _check_rows(L: int) -> list[tuple[int, int]]:
    """Up to 8 query rows at the start, middle and end: cheap to check against float64."""
    n = min(8, L)
    starts = sorted({0, max(0, L // 2 - n // 2), L - n})
    return [(lo, lo + n) for lo in starts]


def _max_error(out: Any, host: list[Any], case: Case) -> float:
    """max |out - float64 plain formula| over the checked rows (NumPy arrays in)."""
    q, k, v = host
    k64, v64 = k.astype("float64"), v.astype("float64")
    keep = case.padding()
    worst = 0.0
    for lo, hi in _check_rows(case.L):
        ref = scaled_dot_product_attention(
            q[..., lo:hi, :].astype("float64"),
            k64,
            v64,
            None if keep is None else backends.load("numpy").from_numpy(keep, "bool"),
            window=case.window,
            is_causal=case.causal,
            q_offset=lo,  # absolute position of the first checked row
            impl="reference",
        )  # (B, H, hi - lo, E)
        err = float(abs(out[..., lo:hi, :].astype("float64") - ref).max())
        if math.isnan(err):
            return err
        worst = max(worst, err)
    return worst


def _forward_backward(tools: Any, attend: Callable[..., Any], q: Any, k: Any, v: Any) -> float:
    """Seconds for one forward + backward of attnkit (raises if the backend has no autodiff)."""
    run = getattr(tools, "forward_backward", None)
    if run is None:
        raise NotImplementedError("this backend's peers module has no forward_backward")
    start = time.perf_counter()
    run(attend, q, k, v)
    return time.perf_counter() - start
