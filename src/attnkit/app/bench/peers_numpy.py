"""NumPy's own attention for ``attnkit bench`` to compare with: the textbook formula.

Each framework's peers module (``peers_numpy``, ``peers_torch``, ``peers_jax``) holds its
own attention functions, for the application to compare attnkit with. The benchmark
(:mod:`attnkit.app.bench`) asks it for three things:

``baselines(kind, *, flex)``   names of the baselines that apply to a case kind
                               (``"dense"``, ``"window"``, ``"decode"``).
``build(name, q, k, v, *, window, scale, causal, mask)``
                               a zero-argument callable computing that baseline on this
                               backend's arrays ``q`` (B, H, L, E), ``k``/``v`` (B, H, S, E)
                               (top-left causal where ``causal``; ``mask`` a bool array
                               broadcastable to (B, H, L, S), True = may attend, or None);
                               its result is (B, H, L, E). Setup that is not the attention
                               itself (masks, compilation wrappers) happens here.
``jit(fn)``                    ``fn`` as this backend compiles it (identity where eager).
``MATERIALIZING``              the baselines that hold the whole (B, H, L, S) score matrix
                               (skipped where it would be too large).

Optionally ``forward_backward(fn, q, k, v)``: run ``fn(q, k, v)`` and its gradient.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["MATERIALIZING", "TEXTBOOK", "baselines", "build", "jit"]

TEXTBOOK = "numpy textbook"
MATERIALIZING = (TEXTBOOK,)


def baselines(kind: str, *, flex: bool = False) -> tuple[str, ...]:
    """The baselines that apply to a case of ``kind``: the textbook formula for full rows."""
    return (TEXTBOOK,) if kind in ("dense", "decode", "causal", "padded") else ()


def jit(fn: Callable[..., Any]) -> Callable[..., Any]:
    """NumPy runs eagerly: ``fn`` itself."""
    return fn


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
    if name != TEXTBOOK:
        raise ValueError(f"no NumPy baseline named {name!r}; expected {TEXTBOOK!r}")
    if window is not None:
        raise ValueError("the textbook formula is dense: it has no window")
    import numpy as np

    allowed = mask
    if causal:
        band = np.tril(np.ones((q.shape[-2], k.shape[-2]), dtype=bool))  # (L, S)
        allowed = band if allowed is None else allowed & band

    def textbook() -> Any:
        # softmax(Q K^T / sqrt(E)) V, the whole (B, H, L, S) score matrix in memory.
        s = (q @ np.swapaxes(k, -1, -2)) * scale  # (B, H, L, S)
        if allowed is not None:
            s = np.where(allowed, s, -np.inf)
        w = np.exp(s - s.max(axis=-1, keepdims=True))  # (B, H, L, S)
        w /= w.sum(axis=-1, keepdims=True)
        return w @ v  # (B, H, L, E)

    return textbook
