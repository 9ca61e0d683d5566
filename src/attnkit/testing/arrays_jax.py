"""JAX arrays to and from float64 NumPy, and float64 switched on, for
:mod:`attnkit.testing.arrays`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["device_of", "float64_enabled", "from_numpy", "to_numpy", "vjp"]


def device_of(x: Any) -> str:
    devices = x.devices() if hasattr(x, "devices") else {x.device}
    return ", ".join(sorted(str(d) for d in devices))


def to_numpy(x: Any) -> np.ndarray:
    a = np.asarray(x)
    return a if a.dtype == np.bool_ else a.astype(np.float64)


def from_numpy(a: np.ndarray, dtype: str, device: Any, transposed: bool) -> Any:
    x = jnp.asarray(a, dtype=getattr(jnp, dtype))
    return x if device is None else jax.device_put(x, device)


@contextlib.contextmanager
def float64_enabled() -> Iterator[None]:
    """Within the block JAX computes float64 (``jax_enable_x64``); restored afterwards."""
    enable = getattr(jax, "enable_x64", None)
    if enable is not None:
        with enable(True):
            yield
        return
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", previous)


def vjp(fn: Any, qkv: list[Any], kwargs: dict[str, Any], grad_out: np.ndarray) -> list[Any]:
    """float64 NumPy gradients of sum(fn(q, k, v, **kwargs) * grad_out) by ``jax.vjp``."""
    out, pull = jax.vjp(lambda q, k, v: fn(q, k, v, **kwargs), *qkv)
    grads = pull(jnp.asarray(grad_out, dtype=out.dtype))
    return [to_numpy(g) for g in grads]
