"""What ``attnkit bench --approx`` measures: the methods, their jobs and measurements.

Linformer (Gaussian and segment-mean projections, k projected positions), Performer (m
orthogonal random features; non-causal, and causal against exact causal attention) and
Nystromformer (m landmarks), next to exact dense and window attention, at lengths L = S
and k = m = 64, 128, 256 (:data:`LENGTHS`, :data:`PARAMS`).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

from attnkit import approx, backends, scaled_dot_product_attention

from ..cases import BATCH, HEAD_DIM, HEADS

__all__ = [
    "GROWTH_BOUND",
    "KINDS",
    "LENGTHS",
    "PARAMS",
    "QUICK",
    "TIMING_INPUTS",
    "ApproxJob",
    "ApproxMeasurement",
    "Method",
    "Sizes",
    "make_call",
    "methods",
]

GROWTH_BOUND = 2.2


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
    ``jit`` (a backend's ``peers.jit``) compiles the computation, matrices as arguments.
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


#: What the timing inputs are, for the report.
TIMING_INPUTS = f"random normal, batch {BATCH}, {HEADS} heads, head size {HEAD_DIM}, float32"
