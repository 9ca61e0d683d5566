"""``torch.compile`` of attnkit's window call, for ``attnkit bench --forms``.

A window-256 call (batch 1, 8 heads of 64, float32), ``torch.compile(fullgraph=True)``
against the same call eager: the seconds of the compiled function's first call (its
compile), then the median of compiled and eager calls.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["compile_first_call", "window_times"]

HEADS, DIM = 8, 64


def _inputs(L: int, seed: int = 0) -> tuple[Any, Any, Any]:
    import torch

    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, HEADS, L, DIM, generator=g) for _ in "qkv")  # type: ignore[return-value]


def _window(q: Any, k: Any, v: Any, W: int) -> Any:
    import attnkit as ak

    return ak.scaled_dot_product_attention(q, k, v, window=(W // 2, W // 2))


def compile_first_call(L: int, W: int) -> float:
    """Seconds of the first call of ``torch.compile(fullgraph=True)`` of the window call
    (compiling it), in a fresh compile cache."""
    import torch

    torch._dynamo.reset()
    q, k, v = _inputs(L)
    fn = torch.compile(lambda q, k, v: _window(q, k, v, W), fullgraph=True)
    start = time.perf_counter()
    fn(q, k, v)
    return time.perf_counter() - start


def window_times(L: int, W: int, repeats: int) -> dict[str, list[float]]:
    """Seconds of ``repeats`` calls each, compiled (after its first call) and eager."""
    import torch

    torch._dynamo.reset()
    q, k, v = _inputs(L)
    compiled = torch.compile(lambda q, k, v: _window(q, k, v, W), fullgraph=True)
    compiled(q, k, v)
    _window(q, k, v, W)
    times: dict[str, list[float]] = {"compiled": [], "eager": []}
    for _ in range(repeats):  # interleaved: the machine's drift falls on both
        for name, fn in (("compiled", compiled), ("eager", lambda *a: _window(*a, W))):
            start = time.perf_counter()
            fn(q, k, v)
            times[name].append(time.perf_counter() - start)
    return times
