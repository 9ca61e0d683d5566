"""``attnkit bench``: time attnkit against each framework's own attention, in one run.

A *job* is one implementation on one case on one backend. Each job draws random normal
inputs (batch 1, 8 heads, head size 64, float32; never zeros), warms up (jit compiles,
allocator), then takes the median of ``repeats`` timed samples, synchronizing after every
call (``block_until_ready`` on JAX). A sample repeats the call enough times to last 10 ms,
so microsecond calls (one decoding step) are timed too. The last result is then checked
against the float64 plain formula on a few query rows: a benchmark that times the wrong
computation reports an error instead of a time.

Peak memory is the operating system's high-water mark of resident memory (``VmHWM`` on
Linux, ``getrusage``'s ``ru_maxrss`` elsewhere). It only ever grows within a process, so
each job runs in its own interpreter, ``python -m attnkit.bench``, reading the job as JSON
on stdin and writing the measurement as JSON on stdout.

Cases (W is the window's total width, as PERFORMANCE.md's "window 256")::

    dense    L = S, full attention
    window   L = S, query i sees keys i - W/2 .. i + W/2: attnkit ``window=(W//2, W//2)``,
             the band |i - j| <= W/2 as a dense bool mask for torch SDPA, as a block mask
             for FlexAttention, ``local_window_size=(W//2, W//2)`` for jax.nn
    decode   L = 1 (one decoding step) over S keys
    causal   L = S, ``is_causal=True`` (for torch SDPA too)
    padded   one decoding step over S keys of which the last S/8 are padding, as a bool
             mask (B, 1, 1, S) given to every implementation (the masked steps of a
             padded batch in ``generate()``)

The causal and padded cases show what attnkit's guard against NaN at masked positions
costs on a fused kernel's path (a finiteness check of the output).
    memory   dense at a large L, one eager call (no jit: under jax.jit every query block
             of the executor would be unrolled), for the peak resident memory

Worker processes get a warmed-up allocator through the environment (:data:`WORKER_ENV`,
each variable only where the caller has not set it): glibc's malloc keeps freed memory
for reuse (``MALLOC_TRIM_THRESHOLD_`` 1 GiB; ``MALLOC_MMAP_THRESHOLD_`` 32 MiB, the
largest it accepts, the value its adaptive threshold climbs to anyway) and asks for
transparent huge pages (``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``, glibc >= 2.35), as
PyTorch's CPU allocator does with ``THP_MEM_ALLOC_ENABLE=1`` and NumPy by default, so
that memory it must map afresh (any array over 32 MiB, such as JAX's or NumPy's
(8, 16384, 64) float32 output) is faulted 2 MiB at a time. Left to the defaults, a
call that frees and allocates blocks of scores gets fresh, page-faulted memory on many
of its allocations (glibc returns the top of its heap as soon as two freed blocks exceed its
trim threshold), and every array over 32 MiB is faulted 4 KiB at a time: that costs up
to half the time of a blocked PyTorch call and falls unevenly on the two sides of a
growth ratio. The same settings apply to every implementation, baselines included;
users get the same speed by setting them (or by running under jemalloc or tcmalloc).

Framework code (the baselines, ``jax.jit``, gradients) lives in
``attnkit.backends.<name>.bench``; this module imports no framework.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from types import ModuleType
from typing import Any

from . import backends
from .attention import scaled_dot_product_attention

__all__ = [
    "ATTNKIT_IMPLS",
    "BATCH",
    "HEADS",
    "HEAD_DIM",
    "HEAP_ONLY_ENV",
    "SCORE_CAP_BYTES",
    "TOLERANCE",
    "WORKER_ENV",
    "Case",
    "Job",
    "Measurement",
    "baselines_for",
    "bench_tools",
    "growth_job",
    "measure",
    "peak_rss_bytes",
    "run_job",
    "worker_env",
]

BATCH, HEADS, HEAD_DIM = 1, 8, 64
#: attnkit's own implementations, as the ``impl`` argument names them after "attnkit ".
ATTNKIT_IMPLS = ("attnkit auto", "attnkit generic")
#: Largest float32 (B, H, L, S) score matrix a baseline in its backend's ``MATERIALIZING``
#: may build; larger cases are skipped with the reason (the machines are shared).
SCORE_CAP_BYTES = 4 * 2**30
#: Largest |result - float64 reference| accepted on the checked rows (float32 inputs).
TOLERANCE = 1e-3
#: A timed sample repeats the call until it lasts at least this long (seconds).
MIN_SAMPLE_S = 0.01
_RESULT_MARK = "attnkit-bench-result "


@dataclass(frozen=True)
class Case:
    """What is computed: ``kind`` in dense, window, decode, causal, padded, memory; W the
    window width."""

    kind: str
    L: int
    S: int
    W: int | None = None

    @property
    def window(self) -> tuple[int, int] | None:
        """attnkit's ``window`` argument: W//2 keys on each side of the query."""
        return None if self.W is None else (self.W // 2, self.W // 2)

    @property
    def causal(self) -> bool:
        return self.kind == "causal"

    def padding(self) -> Any:
        """The padded case's bool mask (B, 1, 1, S) as nested lists: the last S/8 keys
        masked; None for other kinds."""
        if self.kind != "padded":
            return None
        row = [j < self.S - self.S // 8 for j in range(self.S)]
        return [[[row]] for _ in range(BATCH)]

    def describe(self, backend: str = "") -> str:
        """``dense torch L=4096``, ``window 256 numpy L=8192``, ``decode jax L=1 S=1024``,
        ``dense torch L=32768 (one call)`` (the memory case)."""
        name = f"window {self.W}" if self.kind == "window" else self.kind
        name = "dense" if self.kind == "memory" else name
        sizes = f"L={self.L}" if self.L == self.S else f"L={self.L} S={self.S}"
        once = "(one call)" if self.kind == "memory" else ""
        return " ".join(part for part in (name, backend, sizes, once) if part)


@dataclass(frozen=True)
class Job:
    """One implementation (``impl``) on one case on one backend."""

    backend: str
    case: Case
    impl: str
    repeats: int = 5
    seed: int = 0
    check_backward: bool = False
    min_rounds: int = 0  # with --targets: rounds this job runs at least (see Check.min_rounds)

    def describe(self) -> str:
        return f"{self.case.describe(self.backend)}  {self.impl}"


@dataclass
class Measurement:
    """The outcome of a job; ``error`` says why there is no time (or what went wrong)."""

    job: Job
    seconds: float | None = None  # median per call
    samples: list[float] = field(default_factory=list)  # per-call seconds of each sample
    calls_per_sample: int = 1
    first_call_s: float | None = None  # setup + first call: compile time included
    base_rss_bytes: int | None = None  # process peak before the implementation ran
    peak_rss_bytes: int | None = None  # process peak after it ran
    max_error: float | None = None  # vs float64 on the checked rows
    backward_s: float | None = None  # forward + backward once, when asked for
    backward_error: str | None = None
    error: str | None = None
    isolated: bool = False  # measured in its own process (memory figures valid)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Measurement:
        job = dict(data["job"])
        job["case"] = Case(**job["case"])
        return cls(**{**data, "job": Job(**job)})


def bench_tools(backend: str) -> ModuleType | None:
    """The backend's ``attnkit.backends.<name>.bench`` module, or None if it has none."""
    adapter = backends.load(backend)
    try:
        return importlib.import_module(".bench", package=adapter.__name__)
    except ModuleNotFoundError:
        return None


def baselines_for(backend: str, kind: str, *, flex: bool = False) -> tuple[str, ...]:
    """The framework baselines that apply to ``kind`` on ``backend`` (none for memory)."""
    tools = bench_tools(backend)
    if tools is None or kind == "memory":
        return ()
    return tuple(tools.baselines(kind, flex=flex))


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


def _inputs(case: Case, seed: int) -> list[Any]:
    """Random normal NumPy float32 q (B, H, L, E), k, v (B, H, S, E)."""
    rng = backends.load("numpy").make_rng(seed)
    shapes = [(BATCH, HEADS, case.L, HEAD_DIM)] + [(BATCH, HEADS, case.S, HEAD_DIM)] * 2
    return [rng.standard_normal(shape, dtype="float32") for shape in shapes]


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
    host = _inputs(case, job.seed)
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

        # One memory call runs eagerly: under jax.jit every query block would be unrolled.
        compiled = attend if tools is None or case.kind == "memory" else tools.jit(attend)

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
        result, samples, calls = _timed(call, adapter, job.repeats)
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


def _timed(call: Callable[[], Any], adapter: ModuleType, repeats: int) -> tuple[Any, list, int]:
    """(last result, per-call seconds of each of ``repeats`` samples, calls per sample)."""

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
        raise NotImplementedError("this backend's bench module has no forward_backward")
    start = time.perf_counter()
    run(attend, q, k, v)
    return time.perf_counter() - start


#: Environment variables every worker process gets unless already set (module docstring).
WORKER_ENV = {
    "MALLOC_TRIM_THRESHOLD_": str(2**30),
    "MALLOC_MMAP_THRESHOLD_": str(2**25),
    "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1",
    "THP_MEM_ALLOC_ENABLE": "1",
}


#: Also set (where unset) for the workers of growth ratios, time(L) / time(L / 2):
#: attnkit's window jobs (target 6) and the growth jobs of ``attnkit bench --approx``.
#: glibc then serves every block from its heap, however large.
#: glibc maps each block of 32 MiB or more afresh and zeroes it on every call, and at
#: batch 1, 8 heads, head size 64 the float32 output is exactly 32 MiB at L = 16384 and
#: 16 MiB (recycled) at 8192: 3 to 5 ms on one side of the ratio only, which is no part of
#: a method's growth (about 5% of a 60 ms call).
HEAP_ONLY_ENV = {"MALLOC_MMAP_MAX_": "0"}


def growth_job(job: Job) -> bool:
    """Whether ``job`` times one side of a growth ratio: attnkit on a window case (the
    baselines and the dense cases, compared with each other, keep glibc's mapping)."""
    return job.case.kind == "window" and job.impl in ATTNKIT_IMPLS


def worker_env(*, heap_only: bool = False) -> dict[str, str]:
    """This process's environment with :data:`WORKER_ENV` (and, ``heap_only``,
    :data:`HEAP_ONLY_ENV`) filled in where unset."""
    return {**WORKER_ENV, **(HEAP_ONLY_ENV if heap_only else {}), **os.environ}


def run_job(job: Job, *, isolated: bool, timeout_s: float = 1800.0) -> Measurement:
    """Measure ``job`` in a fresh interpreter (``isolated``) or in this process.

    In this process the memory figures would be this process's peak so far, not the job's,
    so they are dropped.
    """
    if not isolated:
        return replace(measure(job), base_rss_bytes=None, peak_rss_bytes=None)
    payload = json.dumps(asdict(job))
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "attnkit.bench"],
            input=payload,
            env=worker_env(heap_only=growth_job(job)),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Measurement(job, error=f"worker timed out after {timeout_s:.0f} s")
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(_RESULT_MARK):
            data = json.loads(line[len(_RESULT_MARK) :])
            return replace(Measurement.from_json(data), isolated=True)
    why = "killed (out of memory?)" if proc.returncode in (-9, 137) else "gave no result"
    tail = (proc.stderr.strip().splitlines() or [""])[-1][:200]
    return Measurement(job, error=f"worker {why}, exit {proc.returncode}: {tail}".rstrip(": "))


def _worker() -> int:
    """``python -m attnkit.bench``: one job as JSON on stdin, its measurement on stdout."""
    data = json.loads(sys.stdin.read())
    job = Job(**{**data, "case": Case(**data["case"])})
    print(_RESULT_MARK + json.dumps(measure(job).to_json()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_worker())
