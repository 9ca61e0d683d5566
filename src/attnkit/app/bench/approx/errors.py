"""The errors of ``attnkit bench --approx``: each method against exact attention.

Computed in this process on the first selected backend, in float32, on every kind of
input of :mod:`attnkit.app.bench.approx.inputs` and every length: the relative Frobenius
error ||out - exact||_F / ||exact||_F (Performer causal against exact causal attention).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from attnkit import backends, scaled_dot_product_attention

from .cases import Method, Sizes, make_call, methods
from .inputs import input_makers

__all__ = ["ErrorResult", "measure_errors", "relative_error"]


@dataclass
class ErrorResult:
    kind: str  # input kind
    method: Method
    L: int
    error: float | None = None
    note: str = ""


def relative_error(out: Any, exact: Any) -> float:
    """||out - exact||_F / ||exact||_F, summed in the arrays' own namespace."""
    import array_api_compat

    xp = array_api_compat.array_namespace(out)
    diff = out - exact
    return (float(xp.sum(diff * diff)) / float(xp.sum(exact * exact))) ** 0.5


def measure_errors(names: tuple[str, ...], sizes: Sizes) -> list[ErrorResult]:
    """Relative Frobenius errors on ``names[0]``, every kind of input and length."""
    adapter = backends.load(names[0])
    results: list[ErrorResult] = []
    for kind, maker in input_makers(max(sizes.lengths)).items():
        for L in sizes.lengths:
            todo = [m for m in methods(sizes) if m.param is None or m.param <= L]
            if isinstance(maker, str):
                results += [ErrorResult(kind, m, L, note=f"skipped: {maker}") for m in todo]
                continue
            _progress(f"[errors] {kind} L={L} on {adapter.NAME} ...")
            q, k, v = (adapter.from_numpy(a, "float32") for a in maker(L))
            exact = {False: scaled_dot_product_attention(q, k, v)}
            for method in todo:
                causal = method.name.endswith("causal")
                if causal not in exact:
                    exact[causal] = scaled_dot_product_attention(q, k, v, is_causal=True)
                try:
                    out = make_call(method, q, k, v)()
                    err = relative_error(out, exact[causal])
                    results.append(ErrorResult(kind, method, L, err))
                except Exception as exc:  # report and keep measuring
                    results.append(
                        ErrorResult(kind, method, L, note=f"{type(exc).__name__}: {exc}")
                    )
    return results


def _progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
