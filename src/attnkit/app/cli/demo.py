"""``attnkit demo``: the worked example, run by the same code on every installed backend.

The example (batch 4, length 10, d_k 64, d_v 128) and the multi-head shape walk-through
(d_model 512 split into 8 heads of 64) are computed from the same random inputs on
NumPy, PyTorch, JAX and array-api-strict, and compared with a float64 evaluation of the
plain formula. Nothing here imports a framework: inputs are drawn and converted through
the backend adapters in ``attnkit.backends``.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

import array_api_compat as aac

from attnkit import MultiHeadParams, backends, multi_head_attention, scaled_dot_product_attention

__all__ = ["EXAMPLES", "DemoRow", "multi_head_walkthrough", "run_demo"]

BATCH, LENGTH, D_K, D_V = 4, 10, 64, 128
D_MODEL, HEADS = 512, 8


@dataclass(frozen=True)
class DemoRow:
    backend: str
    example: str
    shape: tuple[int, ...]
    max_error: float
    milliseconds: float


def multi_head_walkthrough(
    x: Any, w_q: Any, w_k: Any, w_v: Any, w_o: Any, heads: int, trace: list[str] | None = None
) -> Any:
    """Multi-head self-attention of ``x`` (B, L, D) with (D, D) projections, any backend.

    Splits D into ``heads`` heads of D / heads features, attends per head, concatenates
    and projects back. ``trace`` collects the shape after every step.
    """
    xp = aac.array_namespace(x)
    B, L, D = x.shape
    note = trace.append if trace is not None else (lambda _: None)
    note(f"x                      {tuple(x.shape)}  (batch, length, d_model)")
    q, k, v = x @ w_q, x @ w_k, x @ w_v  # (B, L, D) each
    note(f"x @ W_q                {tuple(q.shape)}")

    def split(t: Any) -> Any:
        t = xp.reshape(t, (B, L, heads, D // heads))  # (B, L, H, E)
        return xp.permute_dims(t, (0, 2, 1, 3))  # (B, H, L, E)

    q, k, v = split(q), split(k), split(v)
    note(f"split into heads       {tuple(q.shape)}  (batch, heads, length, d_k)")
    out = scaled_dot_product_attention(q, k, v)  # (B, H, L, E)
    note(f"attention per head     {tuple(out.shape)}")
    out = xp.reshape(xp.permute_dims(out, (0, 2, 1, 3)), (B, L, D))  # (B, L, D)
    note(f"concatenate heads      {tuple(out.shape)}")
    out = out @ w_o  # (B, L, D)
    note(f"@ W_o                  {tuple(out.shape)}")
    return out


def _timed(fn: Any, adapter: Any, repeats: int) -> tuple[Any, float]:
    result = fn()  # warm-up (jit caches, allocator)
    adapter.synchronize(result)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        adapter.synchronize(result)
        times.append(time.perf_counter() - start)
    return result, 1000 * statistics.median(times)


def _inputs(seed: int) -> dict[str, Any]:
    rng = backends.load("numpy").make_rng(seed)
    scale = D_MODEL**-0.5
    return {
        "q": rng.standard_normal((BATCH, LENGTH, D_K)),
        "k": rng.standard_normal((BATCH, LENGTH, D_K)),
        "v": rng.standard_normal((BATCH, LENGTH, D_V)),
        "x": rng.standard_normal((BATCH, LENGTH, D_MODEL)),
        **{w: rng.standard_normal((D_MODEL, D_MODEL)) * scale for w in ("wq", "wk", "wv", "wo")},
    }


EXAMPLES = ("attention (4, 10, 64) -> d_v 128", "multi-head 512 = 8 x 64")


def _examples(adapter: Any, data: dict[str, Any], dtype: str) -> tuple[Any, Any]:
    """The two examples as zero-argument functions over ``data`` moved to ``adapter``."""
    a = {name: adapter.from_numpy(value, dtype) for name, value in data.items()}

    def single() -> Any:
        return scaled_dot_product_attention(a["q"], a["k"], a["v"])  # (B, L, Ev)

    # The library's layer (nn.Linear layout, W.T), checked against the walk-through in float64
    xp = aac.array_namespace(a["x"])
    params = MultiHeadParams(*(xp.matrix_transpose(a[w]) for w in ("wq", "wk", "wv", "wo")))

    def heads() -> Any:
        return multi_head_attention(a["x"], params=params, num_heads=HEADS).output  # (B, L, D)

    return single, heads


def run_demo(
    names: tuple[str, ...] = backends.NAMES, dtype: str = "float32", repeats: int = 5, seed: int = 0
) -> tuple[list[DemoRow], list[str], list[str]]:
    """Run the examples on each available backend of ``names``.

    Returns (rows, missing backends with their install hints, the walk-through's shapes).
    The error is measured against the plain formula (``impl="reference"``) in float64.
    """
    data = _inputs(seed)
    np_adapter = backends.load("numpy")
    a = {name: np_adapter.from_numpy(value, "float64") for name, value in data.items()}
    trace: list[str] = []
    gold = [
        scaled_dot_product_attention(a["q"], a["k"], a["v"], impl="reference"),
        multi_head_walkthrough(a["x"], a["wq"], a["wk"], a["wv"], a["wo"], HEADS, trace),
    ]
    rows: list[DemoRow] = []
    missing: list[str] = []
    for name in names:
        adapter = backends.load(name)
        if not adapter.available():
            missing.append(f"{name}: {adapter.install_hint}")
            continue
        for label, fn, reference in zip(
            EXAMPLES, _examples(adapter, data, dtype), gold, strict=True
        ):
            out, ms = _timed(fn, adapter, repeats)
            error = float(abs(adapter.to_numpy(out).astype("float64") - reference).max())
            rows.append(DemoRow(name, label, tuple(out.shape), error, ms))
    return rows, missing, trace
