"""16-bit gradients at least as accurate as PyTorch's math backend.

PyTorch's own rule (test_transformers.py): a low-precision result passes when its error
against a float64 reference is within a fudge factor of the math backend's error in the
same low precision. Here: attnkit's float16/bfloat16 gradients of q, k, v (and of a
float mask) on every backend that has the dtype, by ``impl="auto"`` and ``"generic"``
on PyTorch, ``jax.grad`` on JAX and ``attention_vjp`` on NumPy, must have
``error <= 4 * max(math error, eps(dtype))`` where each error is the largest
|grad - float64 grad| relative to max(1, max |float64 grad|); the float64 gradients come
from torch autograd through the float64 math backend on the very inputs the 16-bit calls
get (rounded to the dtype first, as PyTorch's tests upcast the low-precision inputs), so
the errors are those of the computation, not of the inputs' rounding. GQA, causal and
float masks included.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import pytest

import attnkit as ak

torch = pytest.importorskip("torch")
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

FUDGE = 4.0
EPS = {"float16": 2.0**-10, "bfloat16": 2.0**-7}
CASES = {
    "plain": ({}, (4, 4)),
    "causal": ({"is_causal": True}, (4, 4)),
    "gqa causal": ({"is_causal": True, "enable_gqa": True}, (4, 2)),
    "float mask": ({"float_mask": True}, (4, 4)),
}
L, S, E = 48, 64, 32


def _inputs(seed: int, hq: int, hkv: int, float_mask: bool) -> list[Any]:
    rng = np.random.default_rng(seed)
    arrays = [
        rng.standard_normal((2, hq, L, E)),
        rng.standard_normal((2, hkv, S, E)),
        rng.standard_normal((2, hkv, S, E)),
        rng.standard_normal((2, hq, L, E)),  # d_out
    ]
    if float_mask:
        arrays.append(rng.standard_normal((1, hq, L, S)))  # a learned bias
    return arrays


def _math_grads(arrays: list[Any], dtype: Any, kwargs: dict[str, Any]) -> list[Any]:
    """Gradients by torch SDPA's math backend in ``dtype`` (float64 grads returned)."""
    q, k, v, d_out, *mask = (torch.tensor(a, dtype=dtype) for a in arrays)
    leaves = [q, k, v, *mask]
    for t in leaves:
        t.requires_grad_(True)
    with sdpa_kernel(SDPBackend.MATH):
        out = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask[0] if mask else None, **kwargs
        )
    return [g.double().numpy() for g in torch.autograd.grad(out, leaves, d_out)]


def _attnkit_grads(backend: str, impl: str, arrays: list[Any], dtype: str, kwargs: dict) -> list:
    if backend == "torch":
        leaves = [torch.tensor(a, dtype=getattr(torch, dtype)) for a in arrays]
        q, k, v, d_out, *mask = leaves
        for t in (q, k, v, *mask):
            t.requires_grad_(True)
        out = ak.scaled_dot_product_attention(
            q, k, v, attn_mask=mask[0] if mask else None, impl=impl, **kwargs
        )
        grads = torch.autograd.grad(out, [q, k, v, *mask], d_out)
        return [g.double().numpy() for g in grads]
    if backend == "jax":
        jax = pytest.importorskip("jax")
        jnp = jax.numpy
        q, k, v, d_out, *mask = (jnp.asarray(a, dtype=dtype) for a in arrays)

        def loss(q: Any, k: Any, v: Any, *mask: Any) -> Any:
            out = ak.scaled_dot_product_attention(
                q, k, v, attn_mask=mask[0] if mask else None, impl=impl, **kwargs
            )
            return jnp.sum(out.astype(jnp.float32) * d_out.astype(jnp.float32))

        grads = jax.grad(loss, argnums=tuple(range(3 + len(mask))))(q, k, v, *mask)
        return [np.asarray(g.astype(jnp.float32), dtype=np.float64) for g in grads]
    q, k, v, d_out, *mask = (a.astype(dtype) for a in arrays)
    _, vjp = ak.attention_vjp(q, k, v, attn_mask=mask[0] if mask else None, impl=impl, **kwargs)
    return [np.asarray(g, dtype=np.float64) for g in vjp(d_out) if g is not None]


def _error(got: list[Any], ref: list[Any]) -> float:
    return max(
        float(np.max(np.abs(g - r))) / max(1.0, float(np.max(np.abs(r))))
        for g, r in zip(got, ref, strict=True)
    )


RUNS = [
    ("torch", "auto"),
    ("torch", "generic"),
    ("jax", "auto"),
    ("numpy", "auto"),
]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(("backend", "impl"), RUNS)
def test_16_bit_gradients_within_4x_the_math_backends_error(
    backend: str, impl: str, dtype: str, case: str
) -> None:
    if backend == "numpy" and dtype == "bfloat16":
        pytest.skip("NumPy has no bfloat16")
    if backend == "jax":
        pytest.importorskip("jax")
    kwargs, (hq, hkv) = CASES[case]
    kwargs = dict(kwargs)
    float_mask = kwargs.pop("float_mask", False)
    arrays = _inputs(zlib.crc32(f"{case} {dtype}".encode()), hq, hkv, float_mask)
    arrays = [torch.tensor(a).to(getattr(torch, dtype)).double().numpy() for a in arrays]
    ref = _math_grads(arrays, torch.float64, kwargs)
    math_error = _error(_math_grads(arrays, getattr(torch, dtype), kwargs), ref)
    ours = _error(_attnkit_grads(backend, impl, arrays, dtype, kwargs), ref)
    allowed = FUDGE * max(math_error, EPS[dtype])
    assert ours <= allowed, (
        f"{backend} {impl} {dtype} {case}: gradient error {ours:.3g} > allowed {allowed:.3g} "
        f"(math backend's {dtype} error {math_error:.3g})"
    )
