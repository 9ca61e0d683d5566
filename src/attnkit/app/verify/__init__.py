"""``attnkit verify``: the golden vectors on every installed backend, and the frameworks.

The golden vectors (:mod:`attnkit.app.verify.golden`, written by ``conformance/make_golden.py``)
hold float64 inputs and the independent float64 oracle's output, weights and log-sum-exp.
Each vector runs through ``attnkit.scaled_dot_product_attention`` on every installed
backend in every dtype the backend has (inputs rounded to that dtype); the largest error
against the float64 oracle is compared with the conformance matrix's tolerance
``K * eps(dtype) * (1 + max|score|) * max(1, max|gold|)``. The same vectors also run
through the frameworks' own attention (:mod:`attnkit.app.verify.frameworks`). The
vectors are NumPy arrays, read and measured by :mod:`attnkit.app.verify.arrays`;
every framework is reached through its backend or its package of the application
(``attnkit.app.<name>``, imported lazily), so this module imports none.

Reference
---------

`attnkit verify` runs the golden vectors (14 cases: masks, both causal alignments, GQA,
windows, rows with nothing to attend, zero length, ranks 2 to 5) through attnkit on every
installed backend in every dtype it has, and prints the largest error against the
independent float64 oracle, as a fraction of the conformance matrix's tolerance
(`64 eps (1 + max|score|) max(1, max|out|)` for float32/64; `8 eps ...` for
float16/bfloat16, whose inputs are rounded too); exit status 1 if any result exceeds
it. It then runs the same vectors through every framework attention that is installed,
in every dtype each takes: PyTorch's `F.scaled_dot_product_attention`,
`nn.MultiheadAttention` (its computation with identity projections, `need_weights=True`
as the module's default), FlexAttention in eager mode, `jax.nn.dot_product_attention`,
and Keras 3's `keras.ops.dot_product_attention` (on JAX unless `KERAS_BACKEND` says
otherwise) when Keras is installed; and prints a findings table in plain words: which
framework differs from the exact answer where, by how much, and what attnkit gives
there. `--json` prints all of it as one JSON document. The vectors ship with the package (`attnkit.app.verify.golden`,
stored once in `src/attnkit/app/verify/golden/`: `python conformance/make_golden.py` writes them
and `conformance/test_golden.py` checks them against what it computes) rather than being
regenerated at run time: stored vectors check an installation against exactly what the
conformance suite checks, whatever the installed NumPy computes. A framework's difference
is named by `attnkit.testing`'s detectors (the convention behind it, in its reports'
words) and said to be, or not to be, what its frameworks table gives that framework.
`attnkit verify --against package.module:function` checks your own function instead.
About 45 s on 2 cores (JAX compiles each shape); `--backend`, `--dtype` and
`--no-frameworks` narrow it.

::

    attnkit verify: 14 golden vectors, oracle float64

    backend  dtype     vectors  max error  / allowed  worst                     result
    -------  --------  -------  ---------  ---------  ------------------------  ------
    numpy    float64   14       8.88e-16   0.007      mask_additive_LS out      ok
    numpy    float32   14       3.66e-07   0.006      seed_3d_batch4_len10 out  ok
    numpy    float16   14       1.14e-03   0.019      mask_bool_empty_rows out  ok
    torch    float64   14       8.88e-16   0.006      rank2_no_heads out        ok
    torch    float32   14       3.94e-07   0.006      rank5_broadcast_lead out  ok
    torch    float16   14       1.14e-03   0.019      mask_bool_empty_rows out  ok
    torch    bfloat16  14       1.86e-02   0.040      gqa_4_over_2 out          ok
    jax      float64   14       8.88e-16   0.008      seed_3d_batch4_len10 out  ok
    jax      float32   14       3.66e-07   0.006      seed_3d_batch4_len10 out  ok
    jax      float16   14       1.14e-03   0.019      mask_bool_empty_rows out  ok
    jax      bfloat16  14       1.86e-02   0.040      gqa_4_over_2 out          ok
    strict   float64   14       8.88e-16   0.007      mask_additive_LS out      ok
    strict   float32   14       3.66e-07   0.006      seed_3d_batch4_len10 out  ok

    The frameworks' own attention on the same vectors, against the oracle (agree: within twice attnkit's tolerance for the dtype):

    framework                 dtype     vectors     agree  max error where agreeing  result
    ------------------------  --------  ----------  -----  ------------------------  ---------
    torch SDPA                float64   14          14     1.1e-15                   agrees
    torch SDPA                float32   14          14     5.9e-07                   agrees
    torch SDPA                float16   14          14     1.1e-03                   agrees
    torch SDPA                bfloat16  14          14     1.9e-02                   agrees
    torch MultiheadAttention  float64   13 (1 n/a)  11     8.9e-16                   2 differ
    torch MultiheadAttention  float32   13 (1 n/a)  11     4.2e-07                   2 differ
    torch MultiheadAttention  bfloat16  13 (1 n/a)  11     1.2e-02                   2 differ
    FlexAttention (eager)     float64   13 (1 n/a)  13     8.9e-16                   agrees
    FlexAttention (eager)     float32   13 (1 n/a)  13     4.2e-07                   agrees
    jax.nn                    float64   14          2      0.0e+00                   12 differ
    jax.nn                    float32   14          12     5.8e-07                   2 differ
    jax.nn                    float16   14          12     1.7e-03                   2 differ
    jax.nn                    bfloat16  14          12     1.9e-02                   2 differ
    keras.ops                 float64   14          1      0.0e+00                   13 differ
    keras.ops                 float32   14          12     5.8e-07                   2 differ
    keras.ops                 bfloat16  14          12     1.9e-02                   2 differ

    Findings (where a framework differs from the exact answer):
      torch MultiheadAttention in float64: rows with no allowed key give NaN: the convention of torch.nn.MultiheadAttention, on 2 vector(s) (causal_L_gt_S_bottom_right, mask_bool_empty_rows) (as attnkit.testing's frameworks table says). attnkit: 0 on those rows, the oracle's answer (max error 8.9e-16 on torch float64).
      torch MultiheadAttention in float32: rows with no allowed key give NaN: the convention of torch.nn.MultiheadAttention, on 2 vector(s) (causal_L_gt_S_bottom_right, mask_bool_empty_rows) (as attnkit.testing's frameworks table says). attnkit: 0 on those rows, the oracle's answer (max error 3.9e-07 on torch float32).
      torch MultiheadAttention in bfloat16: rows with no allowed key give NaN: the convention of torch.nn.MultiheadAttention, on 2 vector(s) (causal_L_gt_S_bottom_right, mask_bool_empty_rows) (as attnkit.testing's frameworks table says). attnkit: 0 on those rows, the oracle's answer (max error 1.9e-02 on torch bfloat16).
      jax.nn in float64: float64 inputs are computed at float32 precision: the convention of jax.nn.dot_product_attention and keras.ops.dot_product_attention, up to 1.9e-07, on 10 vector(s) (basic_4d, causal_L_lt_S_bottom_right, causal_square, gqa_4_over_2, +6 more) (as attnkit.testing's frameworks table says). attnkit: max error 8.9e-16 on jax float64.
      jax.nn in float64: rows with no allowed key give the mean of the values (uniform weights): the convention of jax.nn.dot_product_attention and keras.ops.dot_product_attention; float64 inputs are computed at float32 precision: the convention of jax.nn.dot_product_attention and keras.ops.dot_product_attention, up to 1.2e+00, on 2 vector(s) (causal_L_gt_S_bottom_right, mask_bool_empty_rows) (as attnkit.testing's frameworks table says). attnkit: 0 on those rows, the oracle's answer (max error 8.9e-16 on jax float64).
      jax.nn in float32: rows with no allowed key give the mean of the values (uniform weights): the convention of jax.nn.dot_product_attention and keras.ops.dot_product_attention, up to 1.2e+00, on 2 vector(s) (causal_L_gt_S_bottom_right, mask_bool_empty_rows) (as attnkit.testing's frameworks table says). attnkit: 0 on those rows, the oracle's answer (max error 3.7e-07 on jax float32).
      jax.nn in float16: rows with no allowed key give the mean of the values (uniform weights): the convention of jax.nn.dot_product_attention and keras.ops.dot_product_attention, up to 1.2e+00, on 2 vector(s) (causal_L_gt_S_bottom_right, mask_bool_empty_rows) (as attnkit.testing's frameworks table says). attnkit: 0 on those rows, the oracle's answer (max error 1.1e-03 on jax float16).
      jax.nn in bfloat16: rows with no allowed key give the mean of the values (uniform weights): the convention of jax.nn.dot_product_attention and keras.ops.dot_product_attention, up to 1.2e+00, on 2 vector(s) (causal_L_gt_S_bottom_right, mask_bool_empty_rows) (as attnkit.testing's frameworks table says). attnkit: 0 on those rows, the oracle's answer (max error 1.9e-02 on jax bfloat16).
      keras.ops in float64: float64 inputs are computed at float32 precision: the convention of jax.nn.dot_product_attention and keras.ops.dot_product_attention, up to 5.8e-07, on 11 vector(s) (L1_S1, basic_4d, causal_L_lt_S_bottom_right, causal_square, +7 more) (as attnkit.testing's frameworks table says). attnkit: max error 8.9e-16 on jax float64.
      keras.ops in float64: rows with no allowed key give the mean of the values (uniform weights): the convention of jax.nn.dot_product_attention and keras.ops.dot_product_attention; float64 inputs are computed at float32 precision: the convention of jax.nn.dot_product_attention and keras.ops.dot_product_attention, up to 1.2e+00, on 2 vector(s) (causal_L_gt_S_bottom_right, mask_bool_empty_rows) (as attnkit.testing's frameworks table says). attnkit: 0 on those rows, the oracle's answer (max error 8.9e-16 on jax float64).
      keras.ops in float32: rows with no allowed key give the mean of the values (uniform weights): the convention of jax.nn.dot_product_attention and keras.ops.dot_product_attention, up to 1.2e+00, on 2 vector(s) (causal_L_gt_S_bottom_right, mask_bool_empty_rows) (as attnkit.testing's frameworks table says). attnkit: 0 on those rows, the oracle's answer (max error 3.7e-07 on jax float32).
      keras.ops in bfloat16: rows with no allowed key give the mean of the values (uniform weights): the convention of jax.nn.dot_product_attention and keras.ops.dot_product_attention, up to 1.2e+00, on 2 vector(s) (causal_L_gt_S_bottom_right, mask_bool_empty_rows) (as attnkit.testing's frameworks table says). attnkit: 0 on those rows, the oracle's answer (max error 1.9e-02 on jax bfloat16).

    How vectors were given to them (what they cannot take as they are):
      torch SDPA: causal bottom_right as an explicit bool mask (causal_L_gt_S_bottom_right, causal_L_lt_S_bottom_right)
      torch SDPA: window=2 as an explicit bool mask (window_int_2)
      torch MultiheadAttention: value Ev=6 zero-padded to E=8 columns (it needs Ev == E) (basic_4d, causal_L_lt_S_bottom_right, causal_square, mask_additive_LS, mask_bool_LS, mask_bool_empty_rows)
      torch MultiheadAttention: causal bottom_right as an explicit bool mask (causal_L_gt_S_bottom_right, causal_L_lt_S_bottom_right)
      torch MultiheadAttention: causal top_left as an explicit bool mask (causal_square)
      torch MultiheadAttention: key/value heads repeated 2 times (GQA) (gqa_4_over_2)
      ... (23 more)

"""  # noqa: E501

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
