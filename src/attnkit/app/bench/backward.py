"""``attnkit bench --backward``: forward+backward of attention, attnkit against the
frameworks, with the gradient targets' verdict lines.

A *step* is one forward and the gradients of q, k and v (batch 1, 8 heads, head size 64,
float32, random inputs and upstream gradient): on PyTorch through
``torch.autograd.grad``, on JAX ``jax.vjp`` under ``jax.jit``, on NumPy
:func:`attnkit.attention_vjp`; the baselines (torch SDPA, the window as a dense band
mask; ``jax.nn.dot_product_attention``) come from ``peers_grad_torch`` and
``peers_grad_jax``. Every job runs in its own interpreter; a step's gradients are checked
(:func:`check_gradients`) before any time counts. The targets (verdict lines:
:mod:`attnkit.app.bench.backward_report`; ``--quick`` divides every length by 16 and
judges nothing)::

    1  dense L=4096 torch       auto step / torch SDPA step <= 1.0; generic / SDPA <= 1.5
    2  window 256 L=8192 torch  auto step / SDPA band-mask step <= 0.05; backward / forward <= 3
    3  window 256               step(L=16384) / step(L=8192) <= 2.2 on numpy, torch, jax
    4  dense L=32768            one step's peak resident memory < 2 GiB, torch and jax (jit)
    5  window 256, jax          jit compile of the step (and the forward) at L=16384 <= 3 s
                                and <= 1.2 x at L=4096
    6  dense L=4096             numpy attention_vjp step / jax.grad of jax.nn (jit) <= 1.0
    7  dense L=32768, one call  peak memory < 2 GiB, torch and jax (jit); jax / torch <= 2
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import attnkit as ak
from attnkit import backends

from .cases import BATCH, HEAD_DIM, HEADS
from .child import print_result, run_module
from .measure import peak_rss_bytes, timed

__all__ = [
    "FULL",
    "QUICK",
    "GradJob",
    "GradResult",
    "Sizes",
    "check_gradients",
    "jobs",
    "measure",
    "run_job",
]

AUTO, GENERIC = "attnkit auto", "attnkit generic"
SDPA, SDPA_BAND, JAX_NN = "torch SDPA", "torch SDPA band mask", "jax.nn.dot_product_attention"
JAX_NN_WINDOW = "jax.nn local window"
#: |dq - float64 dq| allowed on the checked rows, relative to max(1, max |float64 dq|).
TOLERANCE = 2e-3
MEMORY_BOUND_BYTES = 2 * 2**30
_RESULT_MARK = "attnkit-bench-backward "


@dataclass(frozen=True)
class GradJob:
    """One measurement: ``what`` is "step" (forward+backward, timed), "forward" (the
    forward of a training step, timed), "memory" (one step, peak memory; under jax.jit
    on JAX), "call" (one forward after a warm-up call, timed once, peak memory: a long
    dense call), "compile" (jax.jit's compile of the step) or "compile forward" (of the
    forward)."""

    backend: str
    impl: str
    kind: str  # "dense", "window" or "causal"
    L: int
    what: str = "step"
    W: int | None = None
    repeats: int = 3
    seed: int = 0

    def describe(self) -> str:
        shape = f"window {self.W}" if self.kind == "window" else self.kind
        shape = f"{shape} L={self.L}"
        return f"{self.backend} {shape} {self.impl} {self.what}"

    @property
    def window(self) -> tuple[int, int] | None:
        return None if self.W is None else (self.W // 2, self.W // 2)


@dataclass
class GradResult:
    """What a job measured; ``error`` says why there is no figure."""

    job: GradJob
    seconds: float | None = None  # median step or forward; compile seconds; memory: the step
    samples: list[float] = field(default_factory=list)
    base_rss_bytes: int | None = None
    peak_rss_bytes: int | None = None
    dq_error: float | None = None  # relative |dq - float64 dq| on the checked rows
    error: str | None = None


def _inputs(job: GradJob) -> list[Any]:
    """q, k, v and the upstream gradient d_out, each (B, H, L, E) NumPy float32."""
    rng = backends.load("numpy").make_rng(job.seed)
    return [rng.standard_normal((BATCH, HEADS, job.L, HEAD_DIM), dtype="float32") for _ in "qkvd"]


def _attnkit(job: GradJob) -> Callable[..., Any]:
    impl = job.impl.split()[-1]
    causal = job.kind == "causal"
    return lambda q, k, v: ak.scaled_dot_product_attention(
        q, k, v, window=job.window, is_causal=causal, impl=impl
    )


def _step(job: GradJob, arrays: list[Any]) -> Callable[[], Any]:
    """A zero-argument callable computing (dq, dk, dv) (or the forward, for "forward")."""
    adapter = backends.load(job.backend)
    q, k, v, d_out = (adapter.from_numpy(a, "float32") for a in arrays)
    if job.backend in ("numpy", "strict"):
        if job.impl not in (AUTO, GENERIC):
            raise ValueError(f"no {job.backend} baseline {job.impl!r} for the backward pass")
        impl = job.impl.split()[-1]

        def step() -> Any:
            causal = job.kind == "causal"
            out, vjp = ak.attention_vjp(q, k, v, window=job.window, is_causal=causal, impl=impl)
            return out if job.what == "forward" else vjp(d_out)

        return step
    if job.backend == "torch":
        from . import peers_grad_torch as peers
    elif job.backend == "jax":
        from . import peers_grad_jax as peers
    else:
        raise ValueError(f"no {job.backend} baseline {job.impl!r} for the backward pass")
    if job.impl in (AUTO, GENERIC):
        fn = _attnkit(job)
    else:
        fn = peers.baseline(job.impl, L=job.L, S=job.L, window=job.window, scale=HEAD_DIM**-0.5)
    if job.what in ("forward", "call"):
        return peers.forward(fn, q, k, v)
    if job.what in ("compile", "compile forward"):
        return lambda: peers.compile_seconds(fn, q, k, v, d_out if job.what == "compile" else None)
    return peers.gradient(fn, q, k, v, d_out)


def check_gradients(job: GradJob, arrays: list[Any], grads: Any) -> float:
    """The error of ``grads`` (dq, dk, dv of ``job`` at ``arrays``), raising if wrong.

    Checked: every gradient finite; dq on 8 query rows at the start, middle and end
    against attnkit's float64 ``attention_vjp`` of those rows alone (``q_offset``: a
    row's dq depends on its own row only), relative to max(1, max |float64 dq|); and two
    identities of the whole: sum over keys of dv = sum over queries of d_out (each row's
    weights sum to 1) and sum over keys of dk = 0 (each row of dS sums to 0). Returns the
    largest relative error found.
    """
    from array_api_compat import array_namespace

    adapter = backends.load(job.backend)
    dq, dk, dv = (adapter.to_numpy(g) for g in grads[:3])
    q, k, v, d_out = arrays
    xp = array_namespace(q)
    for label, g in (("dq", dq), ("dk", dk), ("dv", dv)):
        if not bool(xp.all(xp.isfinite(g))):
            raise FloatingPointError(f"the gradient {label} is not finite")
    k64, v64 = (xp.astype(a, xp.float64) for a in (k, v))
    worst = 0.0
    n = min(8, job.L)
    for lo in sorted({0, max(0, job.L // 2 - n // 2), job.L - n}):
        rows = slice(lo, lo + n)
        q64, d64 = (xp.astype(a[..., rows, :], xp.float64) for a in (q, d_out))
        causal = job.kind == "causal"
        _, vjp = ak.attention_vjp(q64, k64, v64, window=job.window, is_causal=causal, q_offset=lo)
        ref = vjp(d64)[0]  # (B, H, n, E)
        gap = float(xp.max(xp.abs(xp.astype(dq[..., rows, :], xp.float64) - ref)))
        worst = max(worst, gap / max(1.0, float(xp.max(xp.abs(ref)))))
    scale = max(1.0, float(xp.max(xp.abs(xp.sum(d_out, axis=-2)))))
    dv_sum = float(xp.max(xp.abs(xp.sum(dv, axis=-2) - xp.sum(d_out, axis=-2)))) / scale
    dk_sum = float(xp.max(xp.abs(xp.sum(dk, axis=-2)))) / max(1.0, float(xp.max(xp.abs(dk))))
    sums_allowed = TOLERANCE * math.sqrt(job.L)  # float32 sums of L terms
    if not worst <= TOLERANCE:
        raise ArithmeticError(f"wrong dq: differs from float64 by {worst:.2e} (> {TOLERANCE:g})")
    if not (dv_sum <= sums_allowed and dk_sum <= sums_allowed):
        raise ArithmeticError(
            f"wrong dk/dv: sum dv - sum d_out = {dv_sum:.2e}, sum dk = {dk_sum:.2e} "
            f"(> {sums_allowed:.2g})"
        )
    return worst


def measure(job: GradJob) -> GradResult:
    """Run ``job`` here and now; a failure gives an ``error``, never raises."""
    try:
        return _measure(job)
    except Exception as exc:  # report any failure of the measured code, keep benchmarking
        return GradResult(job, error=f"{type(exc).__name__}: {exc}".strip()[:300])


def _measure(job: GradJob) -> GradResult:
    arrays = _inputs(job)
    adapter = backends.load(job.backend)
    call = _step(job, arrays)
    base = peak_rss_bytes()
    if job.what.startswith("compile"):
        seconds = call()
        return GradResult(job, seconds=seconds, samples=[seconds])
    start = time.perf_counter()
    result = call()  # warm-up: jit compiles, allocator
    first = time.perf_counter() - start
    if job.what == "memory":
        samples = [first]
    else:
        result, samples, _ = timed(call, adapter, 1 if job.what == "call" else job.repeats)
    peak = peak_rss_bytes()
    forward = job.what in ("forward", "call")
    error = None if forward else check_gradients(job, arrays, result)
    return GradResult(
        job,
        seconds=statistics.median(samples),
        samples=samples,
        base_rss_bytes=base,
        peak_rss_bytes=peak,
        dq_error=error,
    )


def run_job(job: GradJob, timeout_s: float = 3600.0) -> GradResult:
    """Measure ``job`` in a fresh interpreter (its own peak memory)."""
    data, why = run_module(
        "attnkit.app.bench.backward", _RESULT_MARK, asdict(job), timeout_s=timeout_s
    )
    if why:
        return GradResult(job, error=why)
    return GradResult(**{**data, "job": job})


@dataclass(frozen=True)
class Sizes:
    dense: int = 4096
    window: tuple[int, int] = (8192, 16384)
    W: int = 256
    memory: int = 32768
    compile: tuple[int, int] = (4096, 16384)


FULL = Sizes()
QUICK = Sizes(dense=256, window=(512, 1024), W=32, memory=2048, compile=(256, 1024))


def jobs(
    sizes: Sizes = FULL, installed: tuple[str, ...] = ("numpy", "torch", "jax")
) -> list[GradJob]:
    """Every job the targets need, on the installed backends among numpy, torch, jax."""
    d, (w1, w2), W = sizes.dense, sizes.window, sizes.W
    out: list[GradJob] = []
    if "torch" in installed:
        out += [GradJob("torch", impl, "dense", d) for impl in (AUTO, GENERIC, SDPA)]
        out += [GradJob("torch", impl, "window", w1, W=W) for impl in (AUTO, GENERIC, SDPA_BAND)]
        out += [GradJob("torch", impl, "window", w1, "forward", W=W) for impl in (AUTO, GENERIC)]
    for name in ("numpy", "torch", "jax"):
        if name in installed:
            out += [
                GradJob(name, AUTO, "window", L, W=W)
                for L in (w1, w2)
                if (name, L) != ("torch", w1)
            ]
    if "jax" in installed:
        for what in ("compile", "compile forward"):
            out += [GradJob("jax", AUTO, "window", L, what, W=W) for L in sizes.compile]
        out += [GradJob("jax", AUTO, "causal", L, "compile") for L in sizes.compile]
        out.append(GradJob("jax", JAX_NN, "dense", d))
    if "numpy" in installed:
        out.append(GradJob("numpy", AUTO, "dense", d))
    for name in ("torch", "jax"):
        if name in installed:
            out.append(GradJob(name, AUTO, "dense", sizes.memory, "memory"))
            out.append(GradJob(name, AUTO, "dense", sizes.memory, "call"))
    return out


def main() -> int:
    """``python -m attnkit.app.bench.backward``: one job as JSON on stdin, its result on
    stdout."""
    job = GradJob(**json.loads(sys.stdin.read()))
    result = measure(job)
    print_result(_RESULT_MARK, {k: v for k, v in asdict(result).items() if k != "job"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
