"""``attnkit verify``, second half: the golden vectors through the frameworks' own attention.

Every installed framework attention runs the same vectors as attnkit, in every dtype it
takes (torch SDPA, ``nn.MultiheadAttention`` and FlexAttention from
``attnkit.app.bench.peers_exact_torch``; ``jax.nn`` and ``keras.ops`` from
``peers_jax`` and ``peers_keras_jax``), each compared with the float64 oracle within
twice attnkit's own tolerance for that dtype. What a framework cannot take as it is
(causal rules, windows and offsets; a value shaped unlike the key) is adapted and said
so; what it cannot express at all is "not applicable". Every other difference is a
finding, named by :mod:`attnkit.testing.findings` and grouped by
:mod:`attnkit.app.verify.findings`. Arrays go through :mod:`attnkit.app.verify.layout`
and :mod:`attnkit.app.verify.arrays`; the framework modules are imported lazily, so this
module imports no framework.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from attnkit.app.verify import arrays
from attnkit.app.verify.layout import heads_first, time_first
from attnkit.testing.findings import name_difference

from . import EPS, FrameworkResult, Vector, _error, allowed_error

__all__ = ["FRAMEWORKS", "Framework", "available_frameworks", "check_frameworks"]


@dataclass(frozen=True)
class Framework:
    """One framework attention: its label, the backend it needs, its dtypes, its runner
    ``run(vector, dtype) -> (output shaped like vector.out, adaptation notes)``."""

    label: str
    backend: str
    dtypes: tuple[str, ...]
    run: Callable[[Vector, str], tuple[Any, list[str]]]
    available: Callable[[], bool] = lambda: True
    key: str = ""  # its key in attnkit.testing's frameworks table


def _torch(name: str) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        from attnkit.app.bench import peers_exact_torch as peers_exact

        return getattr(peers_exact, name)(*args, **kwargs)

    return run


def _jax_nn(*args: Any, **kwargs: Any) -> Any:
    from attnkit.app.bench import peers_jax as peers

    with peers.float64_enabled():
        return peers.dot_product_attention(*args, **kwargs)


def _keras(*args: Any, **kwargs: Any) -> Any:
    from attnkit.app.bench import peers_jax as peers
    from attnkit.app.bench import peers_keras_jax as peers_keras

    with peers.float64_enabled():
        return peers_keras.dot_product_attention(*args, **kwargs)


def _keras_available() -> bool:
    from attnkit.app.bench import peers_keras_jax as peers_keras

    return peers_keras.available()


_ALL = ("float64", "float32", "float16", "bfloat16")
#: Every framework attention verify knows, in the order it reports them.
FRAMEWORKS = (
    Framework(
        "torch SDPA",
        "torch",
        _ALL,
        heads_first(_torch("sdpa"), top_left_ok=True),
        key="torch_sdpa",
    ),
    Framework(
        "torch MultiheadAttention",
        "torch",
        ("float64", "float32", "bfloat16"),
        heads_first(_torch("multihead"), top_left_ok=False, one_head_size=True),
        key="torch_mha",
    ),
    Framework(
        "FlexAttention (eager)",
        "torch",
        ("float64", "float32"),
        heads_first(_torch("flex"), top_left_ok=False),
        key="flex",
    ),
    Framework("jax.nn", "jax", _ALL, time_first(_jax_nn), key="jax_nn"),
    Framework(
        "keras.ops",
        "jax",
        ("float64", "float32", "bfloat16"),
        time_first(_keras),
        _keras_available,
        key="keras",
    ),
)


def available_frameworks(backends: tuple[str, ...]) -> list[Framework]:
    """The frameworks whose backend is among ``backends`` and that are installed."""
    return [f for f in FRAMEWORKS if f.backend in backends and f.available()]


def _check(framework: Framework, vector: Vector, dtype: str) -> FrameworkResult:
    from attnkit.app.bench.peers_exact_torch import NotExpressible

    base = dict(framework=framework.label, vector=vector.name, dtype=dtype)
    try:
        theirs, notes = framework.run(vector, dtype)
    except NotExpressible as exc:
        return FrameworkResult(
            **base,
            max_error=None,
            agrees=True,
            difference="",
            adaptation=f"not applicable: {exc}",
            kind="n/a",
        )
    except Exception as exc:  # a framework refusing the input is a finding
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return FrameworkResult(
            **base,
            max_error=None,
            agrees=False,
            adaptation="",
            difference=f"refused: {type(exc).__name__}: {message[:100]}",
            kind="refused",
        )
    allowed = 2 * allowed_error(dtype, vector, vector.out)
    note = "; ".join(notes)
    # rows with no key to attend are checked on their own: low precision's tolerance is
    # wide enough to hide the mean of the values there
    empty = arrays.empty_rows_differ(vector.value, vector.empty_rows, theirs, EPS[dtype])
    error = _error(theirs, vector.out)
    if not empty and error <= allowed:
        return FrameworkResult(
            **base, max_error=error, agrees=True, difference="", adaptation=note, kind="agrees"
        )
    named = name_difference(
        vector.query,
        vector.key,
        vector.value,
        vector.attn_mask,
        vector.kwargs,
        dtype,
        theirs,
        framework.key,
    )
    kind, words = named.kind, named.words
    if not words:  # nothing the kit knows explains it: say where and how much
        kind = "empty rows" if empty else "differs"
        words = empty or arrays.difference(vector.out, vector.empty_rows, theirs, allowed, None)[1]
    return FrameworkResult(
        **base,
        max_error=error if math.isfinite(error) else None,
        agrees=False,
        difference=words,
        adaptation=note,
        kind=kind,
        conventions=named.conventions,
        declared=named.declared,
    )


def check_frameworks(
    vectors: list[Vector],
    backends: tuple[str, ...],
    step: Callable[[str], None] | None = None,
    dtypes: tuple[str, ...] | None = None,
) -> list[FrameworkResult]:
    """Run every vector through every installed framework of ``backends`` ("torch",
    "jax") in each of its dtypes (those in ``dtypes`` if given)."""
    results = []
    for framework in available_frameworks(backends):
        for dtype in framework.dtypes:
            if dtypes and dtype not in dtypes:
                continue
            for vector in vectors:
                if step is not None:
                    step(f"{framework.label} {dtype} {vector.name}")
                results.append(_check(framework, vector, dtype))
    return results
