"""``attnkit bench --approx``: how far, how fast and how big the approximate attentions are.

For Linformer (Gaussian and segment-mean projections, k projected positions), Performer
(m orthogonal random features; non-causal, and causal against exact causal attention)
and Nystromformer (m landmarks, 6 pseudo-inverse iterations), at lengths L = S and
k = m = 64, 128, 256 (:data:`LENGTHS`, :data:`PARAMS`), this measures

- **error**: the relative Frobenius error ||out - exact||_F / ||exact||_F of the output
  against exact attention (``attnkit.scaled_dot_product_attention``, computed in the same
  float32), on three kinds of inputs (:mod:`attnkit.bench_approx_inputs`): random normal
  q, k, v; a smooth low-rank signal plus noise; and q, k, v captured from a real model
  (MiniLM) on real text. Exact dense attention (the reference, error 0) and window
  attention (W = 256, query i sees keys i - 128 .. i + 128) are listed alongside;
- **time**: the median of ``repeats`` calls after a warm-up (compilation excluded), with
  ``attnkit.bench``'s timing loop, on random inputs (batch 1, 8 heads, head size 64);
  the random matrices (projections, features) are drawn before the clock starts;
- **memory**: the peak resident memory of the job's own process during the calls, over
  what it held just before them with the inputs and matrices made (on Linux the
  high-water mark is reset at that point, so freed temporaries of the input conversion
  cannot hide the working memory; elsewhere the peak so far is the baseline);
- **linear growth**: time(L) / time(L/2) at the largest L, which a method linear in L
  keeps near 2 (the bound checked is 2.2; dense attention is quadratic: about 4). The
  two sizes run in one process, timed alternately, and the ratio of the two fastest
  samples is reported (load on a shared machine only ever adds time, and alternating
  exposes both sides to it alike; ``attnkit bench --targets`` keeps fastest rounds too).

Framework code lives in ``attnkit.backends``; this module imports no framework.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from . import approx, backends
from .attention import scaled_dot_product_attention
from .bench import (
    BATCH,
    HEAD_DIM,
    HEADS,
    Case,
    _inputs,
    _timed,
    bench_tools,
    peak_rss_bytes,
    worker_env,
)

__all__ = [
    "GROWTH_BOUND",
    "LENGTHS",
    "PARAMS",
    "QUICK",
    "ApproxJob",
    "ApproxMeasurement",
    "Method",
    "Sizes",
    "make_call",
    "measure",
    "methods",
    "run_job",
]

GROWTH_BOUND = 2.2
_RESULT_MARK = "attnkit-bench-approx-result "


@dataclass(frozen=True)
class Sizes:
    """Lengths L = S, the parameters k / m, the window width W; the growth ratio is
    measured between the largest length and its half."""

    lengths: tuple[int, ...] = (1024, 4096, 16384)
    params: tuple[int, ...] = (64, 128, 256)
    window: int = 256

    @property
    def growth(self) -> tuple[int, int]:
        top = max(self.lengths)
        return top // 2, top


LENGTHS, PARAMS = Sizes().lengths, Sizes().params
#: Tiny sizes for smoke runs (``--quick``): the same tables in seconds.
QUICK = Sizes(lengths=(64, 128, 256), params=(8, 16), window=32)


@dataclass(frozen=True)
class Method:
    """``name`` in :data:`KINDS`; ``param`` is k (Linformer), m (Performer, Nystrom) or W."""

    name: str
    param: int | None = None

    @property
    def label(self) -> str:
        symbol = {"window": "W", "linformer gaussian": "k", "linformer mean": "k"}
        unit = symbol.get(self.name, "m")
        return self.name if self.param is None else f"{self.name} {unit}={self.param}"

    @property
    def linear(self) -> bool:
        return self.name != "exact dense"


KINDS = (
    "exact dense",
    "window",
    "linformer gaussian",
    "linformer mean",
    "performer",
    "performer causal",
    "nystrom",
)


def methods(sizes: Sizes) -> list[Method]:
    out = [Method("exact dense"), Method("window", sizes.window)]
    for name in KINDS[2:]:
        out += [Method(name, p) for p in sizes.params]
    return out


def make_call(method: Method, q: Any, k: Any, v: Any, *, seed: int = 0, jit: Any = None):
    """A zero-argument callable computing ``method`` on q, k, v (B, H, L, E) of one backend.

    Random matrices are drawn here from the backend's generator for ``seed`` (untimed);
    ``jit`` (a backend's ``bench.jit``) compiles the computation, matrices as arguments.
    """
    import array_api_compat

    adapter = backends.for_namespace(array_api_compat.array_namespace(q))
    S, E, p = k.shape[-2], q.shape[-1], method.param
    matrix = None
    if method.name == "exact dense":

        def fn(q: Any, k: Any, v: Any, _: Any) -> Any:
            return scaled_dot_product_attention(q, k, v)

    elif method.name == "window":

        def fn(q: Any, k: Any, v: Any, _: Any) -> Any:
            return scaled_dot_product_attention(q, k, v, window=(p // 2, p // 2))

    elif method.name.startswith("linformer"):
        kind = method.name.split()[-1]
        rng = adapter.make_rng(seed) if kind == "gaussian" else None
        matrix = approx.linformer_projections(S, p, like=q, rng=rng, kind=kind)

        def fn(q: Any, k: Any, v: Any, proj: Any) -> Any:
            return approx.linformer(q, k, v, proj_k=proj)

    elif method.name.startswith("performer"):
        matrix = approx.performer_features(p, E, rng=adapter.make_rng(seed), like=q)
        causal = method.name.endswith("causal")

        def fn(q: Any, k: Any, v: Any, w: Any) -> Any:
            return approx.performer(q, k, v, features=w, causal=causal)

    elif method.name == "nystrom":

        def fn(q: Any, k: Any, v: Any, _: Any) -> Any:
            return approx.nystrom(q, k, v, num_landmarks=p)

    else:
        raise ValueError(f"unknown method {method.name!r}; expected one of {KINDS}")
    compiled = fn if jit is None else jit(fn)
    return lambda: compiled(q, k, v, matrix)


@dataclass(frozen=True)
class ApproxJob:
    """One method at one length on one backend, timed on random inputs.

    With ``growth_of`` (a shorter length) the job measures time(L) / time(growth_of)
    instead: both sizes in one process, timed alternately ``repeats`` times, the ratio of
    each adjacent pair kept, so that load on a shared machine hits both sides alike; each
    sample repeats the call for at least ``sample_s`` seconds, so that a short burst of
    load cannot dominate one side of a pair."""

    backend: str
    method: Method
    L: int
    repeats: int = 3
    seed: int = 0
    growth_of: int | None = None
    sample_s: float = 0.1  # growth jobs: a sample lasts at least this long

    def describe(self) -> str:
        what = f"L={self.L}" if self.growth_of is None else f"L={self.L} / L={self.growth_of}"
        return f"{self.backend} {self.method.label} {what}"


@dataclass
class ApproxMeasurement:
    job: ApproxJob
    seconds: float | None = None  # median per call
    samples: list[float] | None = None
    first_call_s: float | None = None  # setup + first call (compilation included)
    base_rss_bytes: int | None = None  # after the inputs and matrices were made
    peak_rss_bytes: int | None = None
    error: str | None = None
    isolated: bool = False
    ratios: list[float] | None = None  # growth jobs: time(L) / time(growth_of) per pair
    short_samples: list[float] | None = None  # growth jobs: the time(growth_of) samples

    @property
    def ratio(self) -> float | None:
        """Growth jobs: fastest time(L) over fastest time(growth_of)."""
        if self.short_samples and self.samples:
            return min(self.samples) / min(self.short_samples)
        return None if not self.ratios else statistics.median(self.ratios)

    @property
    def extra_bytes(self) -> int | None:
        if not self.isolated or self.peak_rss_bytes is None or self.base_rss_bytes is None:
            return None
        return self.peak_rss_bytes - self.base_rss_bytes

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ApproxMeasurement:
        job = dict(data["job"])
        job["method"] = Method(**job["method"])
        return cls(**{**data, "job": ApproxJob(**job)})


def measure(job: ApproxJob) -> ApproxMeasurement:
    """Time ``job`` here and now; a failure gives an ``error``, never raises."""
    try:
        adapter, tools = backends.load(job.backend), bench_tools(job.backend)
        jit = getattr(tools, "jit", None)

        def build(L: int) -> Any:
            host = _inputs(Case("dense", L, L), job.seed)  # NumPy (B, H, L, E) float32
            q, k, v = (adapter.from_numpy(a, "float32") for a in host)
            return make_call(job.method, q, k, v, seed=job.seed, jit=jit)

        if job.growth_of is not None:
            return _growth(job, adapter, build(job.growth_of), build(job.L))
        start = time.perf_counter()
        call = build(job.L)
        base = _reset_peak_rss() or peak_rss_bytes()
        adapter.synchronize(call())  # warm-up: compilation, allocator
        first = time.perf_counter() - start
        _, samples, _ = _timed(call, adapter, job.repeats)
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


def run_job(job: ApproxJob, *, isolated: bool, timeout_s: float = 1800.0) -> ApproxMeasurement:
    """Measure ``job`` in a fresh interpreter (``isolated``: valid peak memory) or here."""
    if not isolated:
        return replace(measure(job), base_rss_bytes=None, peak_rss_bytes=None)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "attnkit.bench_approx"],
            input=json.dumps(asdict(job)),
            # attnkit.bench's allocator settings; growth: every block from glibc's heap
            env=worker_env(heap_only=job.growth_of is not None),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return ApproxMeasurement(job, error=f"worker timed out after {timeout_s:.0f} s")
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(_RESULT_MARK):
            data = json.loads(line[len(_RESULT_MARK) :])
            return replace(ApproxMeasurement.from_json(data), isolated=True)
    tail = (proc.stderr.strip().splitlines() or [""])[-1][:200]
    return ApproxMeasurement(job, error=f"worker gave no result, exit {proc.returncode}: {tail}")


def relative_error(out: Any, exact: Any) -> float:
    """||out - exact||_F / ||exact||_F, summed in the arrays' own namespace."""
    import array_api_compat

    xp = array_api_compat.array_namespace(out)
    diff = out - exact
    return (float(xp.sum(diff * diff)) / float(xp.sum(exact * exact))) ** 0.5


def _worker() -> int:
    """``python -m attnkit.bench_approx``: one job as JSON on stdin, its measurement out."""
    data = json.loads(sys.stdin.read())
    job = ApproxJob(**{**data, "method": Method(**data["method"])})
    print(_RESULT_MARK + json.dumps(measure(job).to_json()), flush=True)
    return 0


#: What the timing inputs are, for the report.
TIMING_INPUTS = f"random normal, batch {BATCH}, {HEADS} heads, head size {HEAD_DIM}, float32"

if __name__ == "__main__":
    sys.exit(_worker())
