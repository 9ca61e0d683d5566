"""``attnkit verify``: the golden vectors on every installed backend, and the frameworks.

The golden vectors (:mod:`attnkit.app.verify.golden`) hold float64 inputs and the
independent float64 oracle's output, weights and log-sum-exp (masks, causal alignments,
GQA, windows, empty rows, zero length, ranks 2 to 5). Each runs through
``attnkit.scaled_dot_product_attention`` on every installed backend in every dtype it has
(inputs rounded to it); the largest error is compared with the conformance tolerance
``K * eps(dtype) * (1 + max|score|) * max(1, max|gold|)`` (K = 64 for float32/64, 8 for
float16/bfloat16); exit status 1 if any result exceeds it.

The same vectors then run through every installed framework's own attention
(:mod:`attnkit.app.verify.frameworks`); :mod:`attnkit.app.verify.findings` says where one
differs, by how much, under which convention, and what attnkit gives there. Arrays are
read and measured by :mod:`attnkit.app.verify.arrays` and laid out by
:mod:`attnkit.app.verify.layout`; frameworks are imported lazily, so this module imports
none.

::

    attnkit verify                                  # every backend, dtype and framework
    attnkit verify --backend torch --dtype float32 --no-frameworks
    attnkit verify --json                           # all of it as one JSON document
    attnkit verify --against package.module:function   # your own function instead
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import attnkit as ak
from attnkit import backends
from attnkit.app.verify import arrays

from . import golden

__all__ = [
    "DTYPES",
    "Agreement",
    "FrameworkResult",
    "Vector",
    "allowed_error",
    "check_backend",
    "load_vectors",
]

#: The dtypes each backend is checked in (array-api-strict has no float16/bfloat16,
#: NumPy no bfloat16).
DTYPES = {
    "numpy": ("float64", "float32", "float16"),
    "torch": ("float64", "float32", "float16", "bfloat16"),
    "jax": ("float64", "float32", "float16", "bfloat16"),
    "strict": ("float64", "float32"),
}
EPS = {"float64": 2.0**-52, "float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}
# float32/float64: the conformance matrix's constant. Low precision: the inputs themselves
# are rounded to the dtype here (the oracle's are not), which the constant absorbs.
K = {"float64": 64.0, "float32": 64.0, "float16": 8.0, "bfloat16": 8.0}


@dataclass(frozen=True)
class Vector:
    """One golden vector: float64 inputs, the call's kwargs and the oracle's results."""

    name: str
    query: Any  # NumPy float64 arrays: (..., Hq, L, E)
    key: Any  # (..., Hk, S, E)
    value: Any  # (..., Hk, S, Ev)
    attn_mask: Any  # bool or float64, broadcastable to (..., Hq, L, S), or None
    kwargs: dict[str, Any]
    out: Any  # (..., Hq, L, Ev)
    weights: Any  # (..., Hq, L, S)
    lse: Any  # (..., Hq, L)

    @property
    def empty_rows(self) -> Any:
        """True where a query row has no key to attend (lse = -inf): (..., Hq, L)."""
        return arrays.empty_rows(self.lse)

    def score_max(self) -> float:
        """max |scaled score| over the whole score matrix (the tolerance's magnitude)."""
        return arrays.score_max(self.query, self.key, self.kwargs.get("scale"))


@dataclass(frozen=True)
class Agreement:
    """One backend and dtype over every vector: the largest error and the allowed one."""

    backend: str
    dtype: str
    vectors: int
    max_error: float
    worst: str  # the vector (and result) with the largest error relative to its allowance
    worst_ratio: float  # that error / its allowed error (<= 1 passes)
    failures: tuple[str, ...]  # "vector: result error e > allowed a", NaN found, exceptions


@dataclass(frozen=True)
class FrameworkResult:
    """One golden vector through a framework's own attention."""

    framework: str
    vector: str
    max_error: float | None  # against the float64 oracle's output; None if not run
    agrees: bool
    difference: str  # where and how it differs from the oracle ("" when it agrees)
    adaptation: str  # how the vector was given to it ("" when as it is)
    dtype: str = "float64"  # the dtype the framework computed in
    #: "agrees", "empty rows", "precision", "differs", "refused" or "n/a" (not applicable)
    kind: str = "agrees"
    #: the conventions attnkit.testing's detectors find behind a difference
    #: ("empty_rows=mean"), and whether its frameworks table gives the framework them
    conventions: tuple[str, ...] = ()
    declared: bool = False


def load_vectors() -> list[Vector]:
    """Every golden vector shipped in :mod:`attnkit.app.verify.golden`."""
    vectors = []
    for file in golden.files():
        with file.open("rb") as f:
            g = arrays.load(f)
        vectors.append(
            Vector(
                name=file.name[: -len(".npz")],
                query=g["query"],
                key=g["key"],
                value=g["value"],
                attn_mask=g.get("attn_mask"),
                kwargs=g["kwargs"],
                out=g["out"],
                weights=g["weights"],
                lse=g["lse"],
            )
        )
    return vectors


def allowed_error(dtype: str, vector: Vector, gold: Any) -> float:
    """The tolerance for one result: K * eps * (1 + max|score|) * max(1, max|gold|)."""
    return K[dtype] * EPS[dtype] * (1.0 + vector.score_max()) * arrays.magnitude(gold)


def _error(got: Any, gold: Any) -> float:
    """max |got - gold|, where -inf must match -inf exactly (lse of empty rows)."""
    return arrays.max_error(got, gold)


@contextlib.contextmanager
def _precision(name: str, dtype: str) -> Iterator[None]:
    """JAX computes float64 only with x64 switched on (restored afterwards)."""
    if name != "jax" or dtype != "float64":
        yield
        return
    from attnkit.app.bench import peers_jax as peers

    with peers.float64_enabled():
        yield


def _run_attnkit(adapter: Any, vector: Vector, dtype: str) -> tuple[Any, Any, Any]:
    q, k, v = (adapter.from_numpy(x, dtype) for x in (vector.query, vector.key, vector.value))
    mask = vector.attn_mask
    if mask is not None:
        mask = adapter.from_numpy(mask, "bool" if mask.dtype == bool else dtype)
    result = ak.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, return_weights=True, return_lse=True, **vector.kwargs
    )
    return tuple(adapter.to_numpy(x) for x in result)


def check_backend(
    name: str, dtype: str, vectors: list[Vector], step: Callable[[str], None] | None = None
) -> Agreement:
    """Run every vector on backend ``name`` in ``dtype``; the largest error and failures.

    ``step(description)`` is called before each vector (for progress bars).
    """
    adapter = backends.load(name)
    worst, worst_ratio, largest, failures = "", -1.0, 0.0, []
    with _precision(name, dtype):
        for vector in vectors:
            if step is not None:
                step(f"{name} {dtype} {vector.name}")
            try:
                results = _run_attnkit(adapter, vector, dtype)
            except Exception as exc:  # reported in the table, not raised
                failures.append(f"{vector.name}: {type(exc).__name__}: {exc}")
                continue
            golds = (vector.out, vector.weights, vector.lse)
            for label, got, gold in zip(("out", "weights", "lse"), results, golds, strict=True):
                error, allowed = _error(got, gold), allowed_error(dtype, vector, gold)
                if not error <= allowed:  # also catches NaN
                    failures.append(f"{vector.name} {label}: error {error:.3g} > {allowed:.3g}")
                    continue
                largest = max(largest, error)
                if error / allowed > worst_ratio:
                    worst, worst_ratio = f"{vector.name} {label}", error / allowed
    ratio = max(worst_ratio, 0.0)
    return Agreement(name, dtype, len(vectors), largest, worst, ratio, tuple(failures))
