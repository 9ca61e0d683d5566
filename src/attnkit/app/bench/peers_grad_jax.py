"""Forward+backward of attention on JAX, for ``attnkit bench --backward``.

The baseline is ``jax.nn.dot_product_attention`` (``local_window_size`` for a window), in
attnkit's (B, H, L, E) layout; attnkit is passed in as a function. Gradients are
``jax.vjp`` of the function against an upstream gradient ``d_out``, under ``jax.jit``
(what JAX users train with) or eagerly (:func:`gradient` with ``jit=False``).
:func:`compile_seconds` times ``jax.jit``'s lowering and compilation of the gradient (or
the forward) alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .peers_jax import JAX_NN, JAX_NN_WINDOW

__all__ = ["baseline", "compile_seconds", "forward", "gradient"]


def baseline(
    name: str, *, L: int, S: int, window: tuple[int, int] | None, scale: float
) -> Callable:
    """``fn(q, k, v) -> out`` (B, H, L, E) of baseline ``name``."""
    import jax

    if (name == JAX_NN and window is None) or (name == JAX_NN_WINDOW and window is not None):

        def attend(q: Any, k: Any, v: Any) -> Any:
            qt, kt, vt = (x.swapaxes(1, 2) for x in (q, k, v))  # (B, L|S, H, E)
            out = jax.nn.dot_product_attention(qt, kt, vt, scale=scale, local_window_size=window)
            return out.swapaxes(1, 2)  # (B, H, L, E)

        return attend
    raise ValueError(f"no JAX gradient baseline {name!r} for window={window!r}")


def _vjp(fn: Callable) -> Callable:
    import jax

    def grads(q: Any, k: Any, v: Any, d_out: Any) -> Any:
        _, pullback = jax.vjp(fn, q, k, v)
        return pullback(d_out)  # (dq, dk, dv)

    return grads


def forward(fn: Callable, q: Any, k: Any, v: Any) -> Callable[[], Any]:
    """A zero-argument callable: ``jax.jit(fn)`` on ``q``, ``k``, ``v``."""
    import jax

    compiled = jax.jit(fn)
    return lambda: compiled(q, k, v)


def gradient(
    fn: Callable, q: Any, k: Any, v: Any, d_out: Any, *, jit: bool = True
) -> Callable[[], Any]:
    """A zero-argument callable: ``(dq, dk, dv)``, the ``jax.vjp`` of ``fn`` at (q, k, v)
    applied to ``d_out``; under ``jax.jit`` unless ``jit`` is False. It waits for them."""
    import jax

    grads = jax.jit(_vjp(fn)) if jit else _vjp(fn)

    def step() -> Any:
        return jax.block_until_ready(grads(q, k, v, d_out))

    return step


def compile_seconds(fn: Callable, q: Any, k: Any, v: Any, d_out: Any | None) -> float:
    """Seconds ``jax.jit`` takes to lower and compile the gradient of ``fn`` (no run), or
    its forward alone where ``d_out`` is None."""
    import jax

    start = time.perf_counter()
    if d_out is None:
        jax.jit(fn).lower(q, k, v).compile()
    else:
        jax.jit(_vjp(fn)).lower(q, k, v, d_out).compile()
    return time.perf_counter() - start
