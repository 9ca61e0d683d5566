"""Approximate attention (attnkit.approx) on the backend under test: same matrices, same numbers.

Every backend gets the same float64 inputs, the same Linformer projection and the same
Performer features (drawn once here with NumPy), so each must reproduce an independent
float64 NumPy oracle written below from the papers' formulas: Linformer
softmax(Q (E K)^T) (F V), FAVOR+ phi(Q) (phi(K)^T V) / phi(Q) (phi(K)^T 1) with the
kernel matrix built densely, and Nystromformer F pinv(A) (B V) with np.array_split
landmarks over the live keys. Under ``--jit`` the calls run inside ``jax.jit``.
Gradients (PyTorch, JAX) must equal central finite differences of the oracle.

Cases are few and tiny (JAX compiles each shape): key padding with a batch whose keys are
all padded (its output must be 0), lengths that are not multiples of the landmark count,
causal with L > S (rows with nothing to attend).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from harness import Backend

from attnkit import approx
from attnkit.testing.tolerances import EPS, assert_close

B, H, E, EV = 2, 2, 5, 4
_rng = np.random.default_rng(2024)
PROJ = _rng.standard_normal((4, 9)) / 2  # Linformer E = F (k = 4, S = 9)
FEATURES = _rng.standard_normal((11, E))  # Performer W (m = 11, E)


@dataclass(frozen=True)
class ApproxCase:
    name: str
    L: int
    S: int
    lengths: tuple[int, int] | None  # live keys per batch; None: no padding mask
    kwargs: dict[str, Any] = field(default_factory=dict)
    # error allowed in units of eps * max(1, max|gold|): the pseudo-inverse iteration of
    # Nystrom amplifies rounding more than one softmax does
    ulps: float = 64.0


CASES = [
    ApproxCase("linformer_padded", 7, 9, (6, 0)),
    ApproxCase("performer_padded", 7, 9, (6, 0)),
    ApproxCase(
        "performer_causal_bottom_right_L_gt_S",
        9,
        7,
        (5, 7),
        {"causal": True, "causal_alignment": "bottom_right", "chunk_size": 4},
    ),
    ApproxCase("nystrom_no_mask", 7, 9, None, {"num_landmarks": 4}, ulps=256.0),
    ApproxCase("nystrom_padded", 7, 9, (8, 2), {"num_landmarks": 3}, ulps=256.0),
]
IDS = [c.name for c in CASES]


def _draw(case: ApproxCase) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(sum(map(ord, case.name)))
    q = rng.standard_normal((B, H, case.L, E))
    k = rng.standard_normal((B, H, case.S, E))
    v = rng.standard_normal((B, H, case.S, EV))
    alive = None
    if case.lengths is not None:
        alive = (np.arange(case.S)[None, :] < np.asarray(case.lengths)[:, None])[:, None, :]
    return q, k, v, alive


# ------------------------------------------------------------------ the float64 oracle


def _softmax(s: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    s = np.where(allowed, s, -np.inf)
    top = s.max(axis=-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(top), top, 0.0))
    total = e.sum(axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def _oracle_row(case: ApproxCase, q, k, v, live, matrix) -> np.ndarray:
    """One (batch, head): q (L, E), k (S, E), v (S, Ev), live (S,) bool; ``matrix`` is
    the Linformer projection or the Performer features."""
    s = 1 / math.sqrt(E)
    k, v = k * live[:, None], v * live[:, None]
    if case.name.startswith("linformer"):
        slot = (np.abs(matrix) @ live) > 0
        return _softmax(s * q @ (matrix @ k).T, slot[None, :]) @ (matrix @ v)
    if case.name.startswith("performer"):

        def phi(x):
            return np.exp(x @ matrix.T - 0.5 * (x * x).sum(-1, keepdims=True))

        a = phi(q * math.sqrt(s)) @ phi(k * math.sqrt(s)).T * live[None, :]  # (L, S)
        if case.kwargs.get("causal"):
            a = a * (np.arange(case.S)[None, :] <= np.arange(case.L)[:, None] + case.S - case.L)
        den = a.sum(-1, keepdims=True)
        return np.divide(a @ v, den, out=np.zeros((case.L, EV)), where=den > 0)
    m = case.kwargs["num_landmarks"]
    kept = np.flatnonzero(live)
    q_land = np.stack([q[p].mean(0) for p in np.array_split(np.arange(case.L), m)])
    groups = [kept[p] for p in np.array_split(np.arange(len(kept)), m)]
    k_land = np.stack([k[g].mean(0) if len(g) else np.zeros(E) for g in groups])
    land = np.array([len(g) > 0 for g in groups])
    f = _softmax(s * q @ k_land.T, land[None, :])
    a = _softmax(s * q_land @ k_land.T, land[None, :])
    b = _softmax(s * q_land @ k.T, live[None, :])
    z = a.T / (np.abs(a).sum(0).max() * np.abs(a).sum(1).max() or 1.0)
    eye = np.eye(m)
    for _ in range(case.kwargs.get("pinv_iterations", 6)):
        az = a @ z
        z = 0.25 * z @ (13 * eye - az @ (15 * eye - az @ (7 * eye - az)))
    return f @ z @ (b @ v)


def oracle(case: ApproxCase, q, k, v, alive, matrix=None) -> np.ndarray:
    """The float64 result (B, H, L, Ev), one (batch, head) at a time."""
    matrix = _matrix(case) if matrix is None else matrix
    out = np.zeros((B, H, case.L, EV))
    for b in range(B):
        live = np.ones(case.S, bool) if alive is None else alive[b, 0]
        for h in range(H):
            out[b, h] = _oracle_row(case, q[b, h], k[b, h], v[b, h], live, matrix)
    return out


# ------------------------------------------------------------------ the calls under test


def _call(case: ApproxCase) -> Callable[..., Any]:
    """fn(q, k, v, mask, matrix) calling attnkit.approx (all arrays positional: jit-able)."""
    kw = {k: v for k, v in case.kwargs.items()}
    if case.name.startswith("linformer"):
        return lambda q, k, v, m, p: approx.linformer(q, k, v, proj_k=p, key_padding_mask=m)
    if case.name.startswith("performer"):
        return lambda q, k, v, m, w: approx.performer(q, k, v, features=w, key_padding_mask=m, **kw)
    return lambda q, k, v, m, _: approx.nystrom(q, k, v, key_padding_mask=m, **kw)


def _matrix(case: ApproxCase) -> np.ndarray:
    return FEATURES if case.name.startswith("performer") else PROJ


def _on_backend(backend: Backend, case: ApproxCase, dtype: str, arrays):
    q, k, v, alive = arrays
    mask = None if alive is None else backend.asarray(alive, "bool")
    converted = [backend.asarray(x, dtype) for x in (q, k, v, _matrix(case))]
    return converted[:3], mask, converted[3]


# float64 everywhere; float32 on the two cheapest cases (JAX compiles each dtype eagerly).
RUNS = [(c, "float64") for c in CASES] + [(c, "float32") for c in CASES[:2]]


@pytest.mark.parametrize("case, dtype", RUNS, ids=[f"{c.name}-{d}" for c, d in RUNS])
def test_same_matrices_same_numbers(case: ApproxCase, dtype: str, backend: Backend) -> None:
    q, k, v, alive = _draw(case)
    (qb, kb, vb), mask, matrix = _on_backend(backend, case, dtype, (q, k, v, alive))
    exact = [x.astype(dtype).astype(np.float64) for x in (q, k, v)]  # what the backend sees
    rounded = _matrix(case).astype(dtype).astype(np.float64)
    gold = oracle(case, *exact, alive, rounded)
    out = backend.call(_call(case), qb, kb, vb, mask, matrix)
    got = backend.to_numpy(out)
    if case.lengths is not None and 0 in case.lengths:
        dead = case.lengths.index(0)
        assert np.all(got[dead] == 0.0), f"batch {dead} has no live key: output must be 0"
    allowed = case.ulps * EPS[dtype] * max(1.0, float(np.abs(gold).max()))
    ctx = f"case {case.name}, backend {backend.name}, {dtype}"
    assert_close("out", got, gold, allowed, ctx)


def _numeric_grads(case: ApproxCase, q, k, v, alive, dout, step: float = 1e-6):
    """Central differences of sum(oracle * dout) with respect to q, k and v."""
    grads = []
    args = [q, k, v]
    for i in range(3):
        g = np.zeros_like(args[i])
        for idx in np.ndindex(*args[i].shape):
            plus = [a.copy() for a in args]
            minus = [a.copy() for a in args]
            plus[i][idx] += step
            minus[i][idx] -= step
            up = np.sum(oracle(case, *plus, alive) * dout)
            down = np.sum(oracle(case, *minus, alive) * dout)
            g[idx] = (up - down) / (2 * step)
        grads.append(g)
    return grads


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_gradients_equal_finite_differences(case: ApproxCase, backend: Backend) -> None:
    if not backend.has_grad:
        pytest.skip(f"{backend.name} has no automatic differentiation")
    q, k, v, alive = _draw(case)
    dout = np.random.default_rng(7).standard_normal((B, H, case.L, EV))
    want = _numeric_grads(case, q, k, v, alive, dout)
    (qb, kb, vb), mask, matrix = _on_backend(backend, case, "float64", (q, k, v, alive))
    call = _call(case)
    got = backend.grads(lambda q, k, v: call(q, k, v, mask, matrix), qb, kb, vb, dout)
    ctx = f"case {case.name}, backend {backend.name}"
    for name, g, w in zip(("dquery", "dkey", "dvalue"), got, want, strict=True):
        assert np.isfinite(g).all(), f"{name} not finite ({ctx})"
        # central differences with step 1e-6 are accurate to about 1e-8 here
        assert_close(name, g, w, 1e-6 * max(1.0, float(np.abs(w).max())), ctx)
