"""What ``attnkit bench`` measures: cases, jobs, measurements, and each backend's baselines.

A *job* is one implementation on one case on one backend: attnkit (``impl="auto"`` or
``"generic"``, :data:`ATTNKIT_IMPLS`) or one of the framework's own attention functions
(:func:`bench_tools`). Inputs are random normal (batch 1, 8 heads, head size 64,
float32). Cases (W is the window's total width)::

    dense    L = S, full attention
    window   L = S, query i sees keys i - W/2 .. i + W/2 (attnkit ``window=(W//2, W//2)``)
    decode   L = 1 (one decoding step) over S keys
    causal   L = S, ``is_causal=True``
    padded   one decoding step over S keys, the last S/8 masked (bool mask (B, 1, 1, S))
    memory   dense at a large L, one call, for the peak resident memory
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import Any

from attnkit import backends

__all__ = [
    "ATTNKIT_IMPLS",
    "BATCH",
    "HEADS",
    "HEAD_DIM",
    "Case",
    "Job",
    "Measurement",
    "baselines_for",
    "bench_tools",
    "random_inputs",
]

BATCH, HEADS, HEAD_DIM = 1, 8, 64
#: attnkit's own implementations, as the ``impl`` argument names them after "attnkit ".
ATTNKIT_IMPLS = ("attnkit auto", "attnkit generic")


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
    seconds: float | None = None  # median per call (over rounds: the median of the rounds')
    samples: list[float] = field(default_factory=list)  # per-call seconds of each sample
    rounds: list[float] = field(default_factory=list)  # each round's median, when rounds > 1
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
    """The backend's ``attnkit.app.bench.peers_<name>`` module (its framework's own
    attention, the baselines), or None if it has none."""
    backends.load(backend)  # an unknown name raises here
    if backend == "numpy":
        from . import peers_numpy as peers
    elif backend == "torch":
        from . import peers_torch as peers
    elif backend == "jax":
        from . import peers_jax as peers
    else:
        return None
    return peers


def baselines_for(backend: str, kind: str, *, flex: bool = False) -> tuple[str, ...]:
    """The framework baselines that apply to ``kind`` on ``backend`` (none for memory)."""
    tools = bench_tools(backend)
    if tools is None or kind == "memory":
        return ()
    return tuple(tools.baselines(kind, flex=flex))


def random_inputs(case: Case, seed: int) -> list[Any]:
    """Random normal NumPy float32 q (B, H, L, E), k, v (B, H, S, E)."""
    rng = backends.load("numpy").make_rng(seed)
    shapes = [(BATCH, HEADS, case.L, HEAD_DIM)] + [(BATCH, HEADS, case.S, HEAD_DIM)] * 2
    return [rng.standard_normal(shape, dtype="float32") for shape in shapes]
