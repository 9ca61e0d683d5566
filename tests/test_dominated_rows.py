"""Gradients of rows dominated by a huge finite additive mask value (issue 25, item 6).

A row whose every score carries the same value ``floor`` (-1e30 in float64, -1e9 or
finfo.min in float32: what many models put in their additive masks) has
lse = floor + log(sum exp(s)) rounded to ``floor``: log(n) is absorbed, exp(s - lse) sums
to up to n, and every path that recomputed the weights from the lse gave gradients up to
n times too large. Each path here is checked against a float64 autodiff oracle:
``torch.autograd`` through the plain formula ``softmax(q k^T scale + mask) @ v``.

Tolerances (printed with the measured error on failure), ``mag`` = max(1, max|gold|):

- float64: ``64 eps (1 + smax) mag``, ``smax`` the score bound without the floor (a
  row's constant cancels in softmax), plus ``8 spacing(floor) mag`` when a score can
  reach half the floor's spacing (-1e6: s + floor then rounds on a grid of 1.2e-10 in
  every path, in sums of another order); at -1e30 every s + floor is exactly the floor.
- float32: TESTING.md's low-precision rule, ``5 err32 + 64 eps32 mag``, where ``err32``
  is the error of the same plain formula in float32 (torch autograd): s + floor rounds to
  the floor in float32 (spacing 64 at 1e9), so the float32 row is uniform in any path.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from _helpers import x64

import attnkit as ak

torch = pytest.importorskip("torch")

L, S, E, Ev = 6, 40, 8, 5
FLOORS = {
    "float64 -1e30": ("float64", -1e30),
    "float64 -1e6": ("float64", -1e6),
    "float32 -1e9": ("float32", -1e9),
    "float32 finfo.min": ("float32", float(np.finfo(np.float32).min)),
}
#: rows dominated by the floor: every key (row 1), every allowed key of a half-masked
#: row (row 3); rows 0, 2, 4, 5 are ordinary (normal bias, a few -inf)
FLOORED = (1, 3)


def _inputs(dtype: str, floor: float, seed: int = 0) -> tuple[np.ndarray, ...]:
    """q (2, L, E), k (2, S, E), v (2, S, Ev), d_out (2, L, Ev), mask (L, S) in ``dtype``."""
    rng = np.random.default_rng(seed)
    q, k, v, d_out = (
        rng.standard_normal(s).astype(dtype) for s in ((2, L, E), (2, S, E), (2, S, Ev), (2, L, Ev))
    )
    mask = rng.standard_normal((L, S))
    mask[0, :7] = -math.inf
    mask[3, ::2] = -math.inf
    mask[list(FLOORED), :] += floor
    return q, k, v, d_out, mask.astype(dtype)


def _formula_grads(q, k, v, d_out, mask, dtype: Any) -> list[np.ndarray]:
    """torch.autograd through softmax(q k^T scale + mask) @ v in ``dtype``, as float64."""
    t = [torch.tensor(np.asarray(x), dtype=dtype, requires_grad=True) for x in (q, k, v)]
    scores = t[0] @ t[1].transpose(-1, -2) / math.sqrt(E) + torch.tensor(mask, dtype=dtype)
    out = torch.softmax(scores, dim=-1) @ t[2]
    out.backward(torch.tensor(d_out, dtype=dtype))
    return [x.grad.double().numpy() for x in t]


def _numpy(q, k, v, d_out, mask, **kw) -> list[Any]:
    _, vjp = ak.attention_vjp(q, k, v, mask, **kw)
    return list(vjp(d_out)[:3])


def _strict(q, k, v, d_out, mask, **kw) -> list[Any]:
    xp = pytest.importorskip("array_api_strict")
    _, vjp = ak.attention_vjp(*(xp.asarray(x) for x in (q, k, v, mask)), **kw)
    return [np.asarray(g) for g in vjp(xp.asarray(d_out))[:3]]


def _torch(impl: str) -> Callable[..., list[Any]]:
    def grads(q, k, v, d_out, mask, **kw) -> list[Any]:
        t = [torch.tensor(x, requires_grad=True) for x in (q, k, v)]
        out = ak.scaled_dot_product_attention(*t, torch.tensor(mask), impl=impl, **kw)
        out.backward(torch.tensor(d_out))
        return [x.grad.numpy() for x in t]

    return grads


def _jax(jit: bool, drop_in: bool = False) -> Callable[..., list[Any]]:
    def grads(q, k, v, d_out, mask, **kw) -> list[Any]:
        jax = pytest.importorskip("jax")
        jnp = jax.numpy
        with x64(jax):
            if drop_in:
                from attnkit.backends.jax.nn import dot_product_attention

                # (2, L, E) as jax.nn's unbatched (T, N, H): heads on the middle axis
                def loss(a, b, c):
                    sw = [jnp.swapaxes(x, 0, 1) for x in (a, b, c)]
                    bias = jnp.asarray(mask)[None]  # (1, T, S)
                    out = dot_product_attention(*sw, bias=bias, **kw)  # (T, N, Ev)
                    return jnp.sum(jnp.swapaxes(out, 0, 1) * d_out)
            else:

                def loss(a, b, c):
                    out = ak.scaled_dot_product_attention(a, b, c, jnp.asarray(mask), **kw)
                    return jnp.sum(out * d_out)

            fn = jax.grad(loss, argnums=(0, 1, 2))
            got = (jax.jit(fn) if jit else fn)(*(jnp.asarray(x) for x in (q, k, v)))
            return [np.asarray(g) for g in got]

    return grads


PATHS: dict[str, Callable[..., list[Any]]] = {
    "numpy attention_vjp": _numpy,
    "strict attention_vjp": _strict,
    "torch generic": _torch("generic"),
    "torch auto": _torch("auto"),
    "jax.grad": _jax(jit=False),
    "jax.jit(jax.grad)": _jax(jit=True),
    "jax drop-in jax.grad": _jax(jit=False, drop_in=True),
}


def _allowed(dtype: str, floor: float, gold: list[np.ndarray], q, k, mask, err32: float) -> float:
    mag = max(1.0, *(float(np.max(np.abs(g))) for g in gold))
    if dtype == "float32":
        return 5 * err32 + 64 * float(np.finfo(np.float32).eps) * mag
    offset = np.zeros(mask.shape)
    offset[list(FLOORED), :] = floor
    finite = np.where(np.isfinite(mask), mask - offset, 0.0)  # the bias less the row's floor
    scores = np.max(np.linalg.norm(q, axis=-1)) * np.max(np.linalg.norm(k, axis=-1))
    smax = float(scores / math.sqrt(E) + np.max(np.abs(finite)))
    spacing = float(np.spacing(abs(floor)))
    rounding = 8 * spacing * mag if smax >= spacing / 2 else 0.0
    return 64 * float(np.finfo(np.float64).eps) * (1 + smax) * mag + rounding


@pytest.mark.parametrize("window", [None, (9, 9)], ids=["dense", "window"])
@pytest.mark.parametrize("floor_case", list(FLOORS), ids=list(FLOORS))
@pytest.mark.parametrize("path", list(PATHS), ids=list(PATHS))
def test_dominated_rows_gradients(path: str, floor_case: str, window: Any) -> None:
    dtype, floor = FLOORS[floor_case]
    q, k, v, d_out, mask = _inputs(dtype, floor)
    kw: dict[str, Any] = {}
    if window is not None:
        if path.startswith("jax drop-in"):
            kw["local_window_size"] = window
        else:
            kw.update(window=window, block_size=2)  # several blocks, tiles narrower than S
        band = np.abs(np.arange(L)[:, None] - np.arange(S)[None, :]) <= window[0]
        mask = np.where(band, mask, np.asarray(-np.inf, mask.dtype))
    gold = _formula_grads(q, k, v, d_out, mask.astype(np.float64), torch.float64)
    err32 = 0.0
    if dtype == "float32":
        same = _formula_grads(q, k, v, d_out, mask, torch.float32)
        err32 = max(float(np.max(np.abs(a - b))) for a, b in zip(same, gold, strict=True))
    got = PATHS[path](q, k, v, d_out, mask, **kw)
    allowed = _allowed(dtype, floor, gold, q, k, mask, err32)
    for name, g, want in zip(("dq", "dk", "dv"), got, gold, strict=True):
        g = np.asarray(g, dtype=np.float64)
        assert not np.isnan(g).any(), f"{path} {floor_case}: {name} has NaN"
        err = float(np.max(np.abs(g - want)))
        assert err <= allowed, (
            f"{path}, {floor_case}, window {window}: {name} max error {err:.3e} > allowed "
            f"{allowed:.3e} against float64 autograd (q {q.shape}, k {k.shape}, v {v.shape}, "
            f"mask {mask.shape}, {dtype}; rows {FLOORED} carry {floor:g})"
        )
