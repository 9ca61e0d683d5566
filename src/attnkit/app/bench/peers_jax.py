"""JAX's own attention, for ``attnkit bench`` and ``attnkit verify`` to compare with.

Baselines of ``attnkit bench``, all under ``jax.jit``: ``jax.nn.dot_product_attention``,
the same with ``local_window_size`` (``jax.nn local window``) and ``jax textbook``
(softmax(Q K^T / sqrt(E)) V). The peers' interface is described in
:mod:`attnkit.app.bench.peers_numpy`. For ``attnkit verify``:
:func:`dot_product_attention` runs the golden vectors' NumPy arrays through
``jax.nn.dot_product_attention``, and :func:`float64_enabled` switches JAX's float64 on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "JAX_NN",
    "JAX_NN_WINDOW",
    "MATERIALIZING",
    "TEXTBOOK",
    "baselines",
    "build",
    "dot_product_attention",
    "float64_enabled",
    "jit",
]

JAX_NN = "jax.nn.dot_product_attention"
JAX_NN_WINDOW = "jax.nn local window"
TEXTBOOK = "jax textbook"
#: jax.nn's XLA implementation on CPU computes the whole score matrix, like the textbook.
MATERIALIZING = (JAX_NN, JAX_NN_WINDOW, TEXTBOOK)


def baselines(kind: str, *, flex: bool = False) -> tuple[str, ...]:
    """The baselines that apply to a case of ``kind``."""
    if kind in ("dense", "decode", "causal", "padded"):
        return (JAX_NN, TEXTBOOK)
    if kind == "window":
        return (JAX_NN_WINDOW,)
    return ()


def jit(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``jax.jit(fn)``: attnkit on JAX is timed compiled, like the baselines."""
    import jax

    return jax.jit(fn)


def build(
    name: str,
    q: Any,
    k: Any,
    v: Any,
    *,
    window: tuple[int, int] | None,
    scale: float,
    causal: bool = False,
    mask: Any = None,
) -> Callable[[], Any]:
    """A zero-argument callable computing baseline ``name`` on ``q``, ``k``, ``v``."""
    import jax

    if name == TEXTBOOK and window is None:
        allowed = mask
        if causal:
            band = jax.numpy.tril(jax.numpy.ones((q.shape[-2], k.shape[-2]), dtype=bool))
            allowed = band if allowed is None else allowed & band

        def textbook(q: Any, k: Any, v: Any) -> Any:  # the whole (B, H, L, S) scores
            s = (q @ k.swapaxes(-1, -2)) * scale
            if allowed is not None:
                s = jax.numpy.where(allowed, s, -jax.numpy.inf)
            return jax.nn.softmax(s, axis=-1) @ v

        f = jax.jit(textbook)
        return lambda: f(q, k, v)
    if (name == JAX_NN and window is None) or (name == JAX_NN_WINDOW and window is not None):
        qt, kt, vt = (x.swapaxes(1, 2) for x in (q, k, v))  # (B, L|S, H, E)

        def attend(q: Any, k: Any, v: Any) -> Any:
            out = jax.nn.dot_product_attention(
                q, k, v, mask=mask, scale=scale, is_causal=causal, local_window_size=window
            )
            return out.swapaxes(1, 2)  # (B, H, L, E)

        f = jax.jit(attend)
        return lambda: f(qt, kt, vt)
    raise ValueError(f"no JAX baseline {name!r} for window={window!r}")


def dot_product_attention(
    query: Any,
    key: Any,
    value: Any,
    *,
    mask: Any = None,
    bias: Any = None,
    scale: float | None = None,
    is_causal: bool = False,
    dtype: str = "float32",
) -> Any:
    """``jax.nn.dot_product_attention`` of NumPy arrays, computed in ``dtype`` (float64
    needs :func:`float64_enabled`).

    query (B, L, N, H), key and value (B, S, K, H) (jax.nn's layout: value shaped like
    key), ``mask`` bool (B|1, N|1, L, S) (True = may attend) and ``bias`` float, as jax.nn
    takes them; returns the output (B, L, N, H) as a NumPy float64 array.
    """
    import jax
    import jax.numpy as jnp
    import numpy as np

    kind = getattr(jnp, dtype)

    def cast(a: Any) -> Any:
        return None if a is None else jnp.asarray(a, kind)

    out = jax.nn.dot_product_attention(
        cast(query),
        cast(key),
        cast(value),
        bias=cast(bias),
        mask=None if mask is None else jnp.asarray(mask, bool),
        scale=scale,
        is_causal=is_causal,
    )
    return np.asarray(out.astype(jnp.float32) if out.dtype.itemsize < 4 else out, np.float64)


@contextlib.contextmanager
def float64_enabled() -> Iterator[None]:
    """Within the block, JAX computes float64 (``jax_enable_x64``); restored afterwards."""
    import jax

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
