"""``attnkit verify``, second half: the golden vectors through the frameworks' own attention.

Every framework attention that is installed runs the same vectors as attnkit, in every
dtype it takes: PyTorch's ``F.scaled_dot_product_attention``, ``nn.MultiheadAttention``
(its computation with identity projections) and FlexAttention (eager), from
``attnkit.backends.torch.peers_exact``; ``jax.nn.dot_product_attention`` and Keras 3's
``keras.ops.dot_product_attention`` (on the JAX backend unless ``KERAS_BACKEND`` says
otherwise), from ``attnkit.backends.jax.peers``/``peers_keras``. Each result is compared
with the float64 oracle within twice attnkit's own tolerance for that dtype.

What a framework cannot take as it is, is adapted and said so: causal rules, windows and
offsets as an explicit bool mask where the framework has no such option; jax.nn's and
Keras' value, which must be shaped like the key, zero-padded or run in chunks of E
columns (exact: attention is linear in the value). A vector a function cannot express at
all (MultiheadAttention with GQA or a custom scale) is "not applicable". Every other
place a framework differs from the oracle is a finding (:mod:`attnkit.app.verify_findings`
words them).

Vectors are put in (B, H, L, E) layout here, in NumPy; the frameworks are called through
their backends, NumPy arrays in and out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .verify import EPS, FrameworkResult, Vector, _error, allowed_error
from .verify_layout import bhle, combined_mask, value_like_key

__all__ = ["FRAMEWORKS", "Framework", "available_frameworks", "check_frameworks"]


@dataclass(frozen=True)
class Framework:
    """One framework attention: its label, the backend it needs, its dtypes, its runner
    ``run(vector, dtype) -> (output shaped like vector.out, adaptation notes)``."""

    label: str
    backend: str
    dtypes: tuple[str, ...]
    run: Callable[[Vector, str], tuple[np.ndarray, list[str]]]
    available: Callable[[], bool] = lambda: True


def _heads_first(
    run: Callable[..., np.ndarray], top_left_ok: bool, one_head_size: bool = False
) -> Callable:
    """A runner for a (B, H, L, E) function ``run(q, k, v, mask, dtype=, scale=[, is_causal=])``.
    ``one_head_size``: the function has one head count, one head size and the default
    scale (MultiheadAttention): key/value heads repeated, value padded to E, the scale
    folded into the query, each said in the notes (all exact but for rounding)."""

    def runner(vector: Vector, dtype: str) -> tuple[np.ndarray, list[str]]:
        mask, causal, note = combined_mask(vector, top_left_ok)
        q, k, v, mask = bhle(vector, mask)
        notes = [note] if note else []
        options: dict[str, Any] = {"dtype": dtype, "scale": vector.kwargs.get("scale")}
        if causal:
            options["is_causal"] = True
        if not one_head_size:
            return run(q, k, v, mask, **options).reshape(vector.out.shape), notes
        H, E, Ev = q.shape[1], q.shape[-1], v.shape[-1]
        if k.shape[1] != H:
            notes.append(f"key/value heads repeated {H // k.shape[1]} times (GQA)")
            k, v = np.repeat(k, H // k.shape[1], axis=1), np.repeat(v, H // k.shape[1], axis=1)
        if options.pop("scale") is not None:
            q = q * (vector.kwargs["scale"] * np.sqrt(E))
            notes.append("scale folded into the query (it scales by 1/sqrt(E))")
        v, chunks = value_like_key(v, E, notes)
        outs = [run(q, k, v[..., c * E : (c + 1) * E], mask, **options) for c in range(chunks)]
        return np.concatenate(outs, axis=-1)[..., :Ev].reshape(vector.out.shape), notes

    return runner


def _time_first(run: Callable[..., np.ndarray]) -> Callable:
    """A runner for a jax.nn-style (B, T, N, H) function whose value is shaped like key."""

    def runner(vector: Vector, dtype: str) -> tuple[np.ndarray, list[str]]:
        L, S = vector.query.shape[-2], vector.key.shape[-2]
        mask, causal, note = combined_mask(vector, top_left_ok=L == S)
        q, k, v, mask = bhle(vector, mask)
        notes = [note] if note else []
        q, k, v = (np.swapaxes(x, 1, 2) for x in (q, k, v))  # (B, T, N, H)
        E, Ev = q.shape[-1], v.shape[-1]
        options: dict[str, Any] = {"scale": vector.kwargs.get("scale"), "is_causal": causal}
        if mask is not None:
            options["mask" if mask.dtype == bool else "bias"] = mask
        v, chunks = value_like_key(v, E, notes)
        outs = [
            run(q, k, v[..., c * E : (c + 1) * E], dtype=dtype, **options) for c in range(chunks)
        ]
        out = np.concatenate(outs, axis=-1)[..., :Ev]  # (B, T, N, Ev)
        return np.swapaxes(out, 1, 2).reshape(vector.out.shape), notes

    return runner


def _torch(name: str) -> Callable[..., np.ndarray]:
    def run(*args: Any, **kwargs: Any) -> np.ndarray:
        from attnkit.backends.torch import peers_exact

        return getattr(peers_exact, name)(*args, **kwargs)

    return run


def _jax_nn(*args: Any, **kwargs: Any) -> np.ndarray:
    from attnkit.backends.jax import peers

    with peers.float64_enabled():
        return peers.dot_product_attention(*args, **kwargs)


def _keras(*args: Any, **kwargs: Any) -> np.ndarray:
    from attnkit.backends.jax import peers, peers_keras

    with peers.float64_enabled():
        return peers_keras.dot_product_attention(*args, **kwargs)


def _keras_available() -> bool:
    from attnkit.backends.jax import peers_keras

    return peers_keras.available()


_ALL = ("float64", "float32", "float16", "bfloat16")
#: Every framework attention verify knows, in the order it reports them.
FRAMEWORKS = (
    Framework("torch SDPA", "torch", _ALL, _heads_first(_torch("sdpa"), top_left_ok=True)),
    Framework(
        "torch MultiheadAttention",
        "torch",
        ("float64", "float32", "bfloat16"),
        _heads_first(_torch("multihead"), top_left_ok=False, one_head_size=True),
    ),
    Framework(
        "FlexAttention (eager)",
        "torch",
        ("float64", "float32"),
        _heads_first(_torch("flex"), top_left_ok=False),
    ),
    Framework("jax.nn", "jax", _ALL, _time_first(_jax_nn)),
    Framework(
        "keras.ops",
        "jax",
        ("float64", "float32", "bfloat16"),
        _time_first(_keras),
        _keras_available,
    ),
)


def available_frameworks(backends: tuple[str, ...]) -> list[Framework]:
    """The frameworks whose backend is among ``backends`` and that are installed."""
    return [f for f in FRAMEWORKS if f.backend in backends and f.available()]


def _empty_rows_differ(vector: Vector, theirs: np.ndarray, dtype: str) -> str:
    """Words for what ``theirs`` gives on rows with no key to attend, where the oracle
    gives 0, or "" if it gives 0 there too (within rounding of the values)."""
    empty = np.broadcast_to(vector.empty_rows, theirs.shape[:-1])
    if not empty.any():
        return ""
    rows = theirs[empty]  # (n, Ev)
    scale = max(1.0, float(np.max(np.abs(vector.value), initial=0.0)))
    if (
        not np.isnan(rows).any()
        and float(np.max(np.abs(rows), initial=0.0)) <= 8 * EPS[dtype] * scale
    ):
        return ""
    v = np.broadcast_to(vector.value, (*theirs.shape[:-2], *vector.value.shape[-2:]))
    mean = np.broadcast_to(v.mean(axis=-2, keepdims=True), theirs.shape)[empty]
    if np.isnan(rows).all():
        what = "NaN"
    elif np.allclose(mean, rows, atol=16 * EPS[dtype] * scale):
        what = "the mean of the values (uniform weights)"
    else:
        what = "nonzero values"
    return f"{int(empty.sum())} rows with no key to attend give {what}"


def _difference(vector: Vector, theirs: np.ndarray, allowed: float, dtype: str) -> tuple[str, str]:
    """(kind, words) for where ``theirs`` differs from the oracle's output on rows with keys."""
    live = ~np.broadcast_to(vector.empty_rows, theirs.shape[:-1])
    gap = np.abs(np.nan_to_num(theirs, nan=np.inf) - vector.out)[live]  # (rows with keys, Ev)
    error = float(np.max(gap, initial=0.0))
    if dtype == "float64" and error <= 2 * allowed_error("float32", vector, vector.out):
        return "precision", f"error {error:.1e}: float32's accuracy on float64 inputs"
    if np.isnan(theirs[live]).any():
        return "differs", f"NaN on {int(np.isnan(theirs[live]).any(-1).sum())} rows with keys"
    bad = int(np.any(gap > allowed, -1).sum())
    return "differs", f"error {error:.1e} on {bad} of {int(live.sum())} rows with keys"


def _check(framework: Framework, vector: Vector, dtype: str) -> FrameworkResult:
    from attnkit.backends.torch.peers_exact import NotExpressible

    base = dict(framework=framework.label, vector=vector.name, dtype=dtype)
    try:
        theirs, notes = framework.run(vector, dtype)
    except NotExpressible as exc:
        return FrameworkResult(
            **base,
            max_error=None,
            agrees=True,
            difference="",
            adaptation=f"not applicable: {exc}",
            kind="n/a",
        )
    except Exception as exc:  # a framework refusing the input is a finding
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return FrameworkResult(
            **base,
            max_error=None,
            agrees=False,
            adaptation="",
            difference=f"refused: {type(exc).__name__}: {message[:100]}",
            kind="refused",
        )
    allowed = 2 * allowed_error(dtype, vector, vector.out)
    note = "; ".join(notes)
    empty = _empty_rows_differ(vector, theirs, dtype)
    if empty:
        error = _error(theirs, vector.out)
        return FrameworkResult(
            **base,
            max_error=error if np.isfinite(error) else None,
            agrees=False,
            difference=empty,
            adaptation=note,
            kind="empty rows",
        )
    error = _error(theirs, vector.out)
    if error <= allowed:
        return FrameworkResult(
            **base, max_error=error, agrees=True, difference="", adaptation=note, kind="agrees"
        )
    kind, words = _difference(vector, theirs, allowed, dtype)
    finite = bool(np.isfinite(error))
    return FrameworkResult(
        **base,
        max_error=error if finite else None,
        agrees=False,
        difference=words,
        adaptation=note,
        kind=kind,
    )


def check_frameworks(
    vectors: list[Vector],
    backends: tuple[str, ...],
    step: Callable[[str], None] | None = None,
    dtypes: tuple[str, ...] | None = None,
) -> list[FrameworkResult]:
    """Run every vector through every installed framework of ``backends`` ("torch",
    "jax") in each of its dtypes (those in ``dtypes`` if given)."""
    results = []
    for framework in available_frameworks(backends):
        for dtype in framework.dtypes:
            if dtypes and dtype not in dtypes:
                continue
            for vector in vectors:
                if step is not None:
                    step(f"{framework.label} {dtype} {vector.name}")
                results.append(_check(framework, vector, dtype))
    return results
