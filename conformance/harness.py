"""Turning a :class:`~cases.Case` into arrays on one backend, and results back to NumPy.

Inputs are drawn once in float64 NumPy (rounded to the case's dtype so that the oracle
sees exactly the values the backend sees), then moved to the backend under test:
NumPy (optionally read-only), PyTorch, JAX (optionally under ``jax.jit``) or
array-api-strict on its second device, where any array attnkit creates on the default
device makes the computation fail.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from cases import Case, MaskSpec

import attnkit as ak
from attnkit import masks as ak_masks
from attnkit.testing import oracle as ref

__all__ = ["Backend", "Inputs", "draw_inputs", "make_backend"]

LOW_PRECISION = ("float16", "bfloat16")


@dataclass
class Inputs:
    """float64 NumPy arrays holding exactly the values the backend receives."""

    query: np.ndarray
    key: np.ndarray
    value: np.ndarray
    mask: np.ndarray | None  # in its own (unexpanded) shape
    mask_spec: MaskSpec | None
    rng: np.random.Generator


def _draw_mask(spec: MaskSpec, rng: np.random.Generator) -> np.ndarray:
    allowed = rng.random(spec.shape) < spec.keep
    if spec.empty_rows and len(spec.shape) >= 2:
        allowed[..., list(spec.empty_rows), :] = False
    if spec.dead_cols:
        allowed[..., list(spec.dead_cols)] = False
    if spec.kind == "bool":
        return allowed
    bias = rng.standard_normal(spec.shape) if spec.bias else np.zeros(spec.shape)
    return np.where(allowed, bias, -np.inf)


def draw_inputs(case: Case) -> Inputs:
    rng = np.random.default_rng(case.seed)
    q, k, v = (rng.standard_normal(shape) * case.magnitude for shape in (case.q, case.k, case.v))
    if case.layout == "broadcast_kv":  # heads of size 1, broadcast (stride 0) on the backend
        k, v = k[..., :1, :, :], v[..., :1, :, :]
    q, k, v = (ref.round_to(x, case.dtype) for x in (q, k, v))
    mask = None
    if case.mask is not None:
        mask = _draw_mask(case.mask, rng)
        if case.mask.kind == "additive":
            mask = ref.round_to(mask, case.mask.dtype or case.dtype)
    return Inputs(q, k, v, mask, case.mask, rng)


def full_inputs(inputs: Inputs, case: Case) -> tuple[np.ndarray, np.ndarray, np.ndarray, Any]:
    """The float64 inputs in the shapes the call sees (broadcasts applied)."""
    k, v = inputs.key, inputs.value
    if case.layout == "broadcast_kv":
        k = np.broadcast_to(k, case.k)
        v = np.broadcast_to(v, case.v)
    mask = inputs.mask
    if mask is not None and inputs.mask_spec.expand_to is not None:
        mask = np.broadcast_to(mask, inputs.mask_spec.expand_to)
    return inputs.query, k, v, mask


class Backend:
    """Conversions, rng and autodiff for one array library in the conformance matrix."""

    name = "?"
    dtypes: tuple[str, ...] = ("float32", "float64")
    has_grad = False

    def __init__(self, readonly: bool = False, jit: bool = False) -> None:
        self.readonly = readonly
        self.jit = jit

    # -- arrays --
    def asarray(self, a: np.ndarray, dtype: str) -> Any:
        raise NotImplementedError

    def to_numpy(self, x: Any) -> np.ndarray:
        raise NotImplementedError

    def broadcast_to(self, x: Any, shape: tuple[int, ...]) -> Any:
        import array_api_compat

        return array_api_compat.array_namespace(x).broadcast_to(x, shape)

    def transposed_view(self, a: np.ndarray, dtype: str) -> Any:
        """The same values as a non-contiguous view (a transpose of a transposed copy)."""
        import array_api_compat

        x = self.asarray(np.ascontiguousarray(np.swapaxes(a, -1, -2)), dtype)
        return array_api_compat.array_namespace(x).matrix_transpose(x)

    def make_rng(self, seed: int) -> Any:
        raise NotImplementedError

    def call(self, fn, *arrays: Any, **kwargs: Any) -> Any:
        return fn(*arrays, **kwargs)

    def grads(self, fn, q, k, v, dout, **kwargs) -> tuple[np.ndarray, ...]:
        """Gradients of sum(fn(q, k, v) * dout). Without autodiff (NumPy, array-api-strict)
        ``attnkit.attention_vjp`` gives them (``fn`` is the attention it differentiates):
        attnkit's own backward pass, written once, checked against the oracle's."""
        if fn is not ak.scaled_dot_product_attention:
            import pytest

            pytest.skip(f"{self.name} has no autodiff for this function (attention_vjp only)")
        out, vjp = ak.attention_vjp(q, k, v, **kwargs)
        d_out = self.asarray(dout, str(out.dtype).split(".")[-1])
        return tuple(self.to_numpy(g) for g in vjp(d_out)[:3])


class NumpyBackend(Backend):
    name = "numpy"
    dtypes = ("float16", "float32", "float64")
    has_grad = True  # attention_vjp

    def asarray(self, a, dtype):
        x = np.array(a, dtype=dtype)
        if self.readonly:
            x.flags.writeable = False
        return x

    def to_numpy(self, x):
        return np.asarray(x, dtype=np.float64)

    def broadcast_to(self, x, shape):
        return np.broadcast_to(x, shape)

    def make_rng(self, seed):
        return np.random.default_rng(seed)


class StrictBackend(Backend):
    name = "strict"
    dtypes = ("float32", "float64")
    has_grad = True  # attention_vjp

    def __init__(self, readonly: bool = False, jit: bool = False) -> None:
        super().__init__(readonly, jit)
        import array_api_strict as xp

        xp.set_array_api_strict_flags(
            api_version="2025.12", boolean_indexing=False, data_dependent_shapes=False
        )
        self.xp = xp
        self.device = xp.Device("device1")  # not the default: catches arrays made elsewhere

    def asarray(self, a, dtype):
        return self.xp.asarray(np.asarray(a, dtype=dtype), device=self.device)

    def to_numpy(self, x):
        assert x.device == self.device, f"result landed on {x.device}, inputs on {self.device}"
        return np.asarray(x.to_device(self.xp.Device("CPU_DEVICE")), dtype=np.float64)

    def make_rng(self, seed):
        return np.random.default_rng(seed)


class TorchBackend(Backend):
    name = "torch"
    dtypes = ("float16", "bfloat16", "float32", "float64")
    has_grad = True

    def __init__(self, readonly: bool = False, jit: bool = False) -> None:
        super().__init__(readonly, jit)
        import torch

        self.torch = torch

    def asarray(self, a, dtype):
        return self.torch.from_numpy(np.array(a, dtype=np.float64)).to(getattr(self.torch, dtype))

    def to_numpy(self, x):
        return x.detach().to(self.torch.float64).numpy()

    def make_rng(self, seed):
        return self.torch.Generator().manual_seed(seed)

    def grads(self, fn, q, k, v, dout, **kwargs):
        leaves = [x.detach().clone().requires_grad_(True) for x in (q, k, v)]
        out = fn(*leaves, **kwargs)
        (out.to(self.torch.float64) * self.torch.from_numpy(dout)).sum().backward()
        return tuple(self.to_numpy(x.grad) for x in leaves)


class JaxBackend(Backend):
    name = "jax"
    dtypes = ("float16", "bfloat16", "float32", "float64")
    has_grad = True

    def __init__(self, readonly: bool = False, jit: bool = False) -> None:
        super().__init__(readonly, jit)
        import jax

        jax.config.update("jax_enable_x64", True)
        self.jax = jax
        self.jnp = jax.numpy

    def asarray(self, a, dtype):
        return self.jnp.asarray(np.asarray(a, dtype=np.float64), dtype=getattr(self.jnp, dtype))

    def to_numpy(self, x):
        return np.asarray(x.astype(self.jnp.float64))

    def make_rng(self, seed):
        return self.jax.random.key(seed)

    def call(self, fn, *arrays, **kwargs):
        if not self.jit:
            return fn(*arrays, **kwargs)
        # Arrays (and the rng key) are traced; everything else is static, as a user would.
        traced = {
            k: v
            for k, v in kwargs.items()
            if k in ("attn_mask", "rng") and v is not None and not isinstance(v, ak_masks.Mask)
        }
        static = {k: v for k, v in kwargs.items() if k not in traced}
        return self.jax.jit(lambda *a, **t: fn(*a, **t, **static))(*arrays, **traced)

    def grads(self, fn, q, k, v, dout, **kwargs):
        jnp = self.jnp

        def loss(q, k, v):
            out = self.call(fn, q, k, v, **kwargs)
            return jnp.sum(out.astype(jnp.float64) * jnp.asarray(dout))

        # Gradients are always taken under jit: eager JAX re-dispatches every op of the
        # backward pass, which makes the matrix slow without testing anything more.
        g = self.jax.jit(self.jax.grad(loss, argnums=(0, 1, 2)))(q, k, v)
        return tuple(self.to_numpy(x) for x in g)


_BACKENDS = {
    "numpy": NumpyBackend,
    "strict": StrictBackend,
    "torch": TorchBackend,
    "jax": JaxBackend,
}


def make_backend(name: str, readonly: bool = False, jit: bool = False) -> Backend:
    return _BACKENDS[name](readonly=readonly, jit=jit)


def to_backend(backend: Backend, inputs: Inputs, case: Case) -> tuple[Any, Any, Any, Any]:
    """The case's inputs on ``backend`` in the requested layout (views, broadcasts)."""
    dt = case.dtype
    if case.layout == "transposed":
        q, k, v = (backend.transposed_view(x, dt) for x in (inputs.query, inputs.key, inputs.value))
    else:
        q, k, v = (backend.asarray(x, dt) for x in (inputs.query, inputs.key, inputs.value))
    if case.layout == "broadcast_kv":
        k, v = backend.broadcast_to(k, case.k), backend.broadcast_to(v, case.v)
    mask = None
    if inputs.mask is not None:
        spec = inputs.mask_spec
        mdt = "bool" if spec.kind == "bool" else (spec.dtype or dt)
        mask = backend.asarray(inputs.mask, mdt)
        if spec.expand_to is not None:
            mask = backend.broadcast_to(mask, spec.expand_to)
    return q, k, v, mask


def with_dtype(case: Case, dtype: str) -> Case:
    return replace(case, dtype=dtype)
