"""Backends: the little each array library needs beyond the array API standard.

The math never imports a framework; what the standard lacks (random numbers, autodiff
helpers, fused kernels) it asks of the backend of the inputs' namespace
(:func:`for_namespace`, registered with :mod:`attnkit.registry` at import). Each
framework is one :class:`Backend` subclass in ``attnkit.backends.<name>`` (``NAMES``),
importing its framework lazily; ``load(name)`` gives its instance; any other array-API
library works through :data:`GENERIC` (no dropout).

The protocol has two halves whose docstrings are the whole contract: `MathBackend`
(`attnkit.backend_protocol`), what the math calls (generators, autodiff hooks, the loop
hook `map_blocks`, and `kernels`, optional fast paths that take arrays and plain
arguments and return None where they do not apply), and `ToolBackend`
(`attnkit.backends.protocol`), what the application and the tests call. What
`impl="auto"` runs:

| backend | `impl="auto"` |
|---|---|
| PyTorch | `F.scaled_dot_product_attention` for the whole call where its semantics equal attnkit's (no dropout, weights, lse, window, structured mask or score_mod; causal only top-left at offset 0; finite output where pairs are masked); else the blocked executor with SDPA on each block |
| NumPy | the blocked executor with its per-block kernel (each head's block in one reused buffer per thread) |
| JAX, array-api-strict, any other array-API library | the blocked executor's array-API arithmetic (under `jax.jit`, XLA fuses it) |

`attnkit.explain(q, k, v, ...)` says which one a call takes and why the faster ones were
declined, without computing attention.

**Adding a backend** (CuPy, Dask, any array-API library): write
`backends/<name>/__init__.py` with one `Backend` subclass (its framework imported inside
the methods) and `BACKEND = MyBackend()`, add `<name>` to `NAMES` and its namespace test
to `name_of` in `backends/__init__.py`, and run the conformance matrix on it (a
`Backend` class for `conformance/harness.py` and a nox session).

"""  # noqa: E501

from __future__ import annotations

import importlib
import sys
from typing import Any

import array_api_compat as _aac

from attnkit import registry as _registry
from attnkit.errors import ArgumentTypeError
from attnkit.shapes import type_name

from .protocol import Backend, BlockTasks, Kernels, MathBackend, ToolBackend

__all__ = [
    "GENERIC",
    "NAMES",
    "Backend",
    "BlockTasks",
    "Kernels",
    "MathBackend",
    "ToolBackend",
    "for_namespace",
    "for_rng",
    "load",
    "name_of",
    "name_or_none",
]

#: Every backend attnkit ships an adapter for, in the order tables list them.
NAMES: tuple[str, ...] = ("numpy", "torch", "jax", "strict")


#: The backend of namespaces attnkit has no adapter for: the array-API path, no dropout.
GENERIC = Backend()

_cache: dict[str, Backend] = {}


def load(name: str) -> Backend:
    """The backend ``attnkit.backends.<name>`` (importing its module, not its framework)."""
    backend = _cache.get(name)
    if backend is None:
        if name not in NAMES:
            raise ValueError(f"unknown backend {name!r}; expected one of {', '.join(NAMES)}.")
        backend = importlib.import_module(f"{__name__}.{name}").BACKEND
        _cache[name] = backend
    return backend


def name_of(xp: Any) -> str:
    """The backend name of an array namespace, or raise ``TypeError`` if none fits."""
    if _aac.is_numpy_namespace(xp):
        return "numpy"
    if _aac.is_torch_namespace(xp):
        return "torch"
    if _aac.is_jax_namespace(xp):
        return "jax"
    if _aac.is_array_api_strict_namespace(xp):
        return "strict"
    raise TypeError(
        f"attnkit has no backend adapter for the array namespace {getattr(xp, '__name__', xp)!r}; "
        f"supported: {', '.join(NAMES)}. Everything except dropout still works on it."
    )


def name_or_none(xp: Any) -> str | None:
    """The backend name of an array namespace, or None when attnkit has no adapter for it."""
    try:
        return name_of(xp)
    except TypeError:
        return None


def for_namespace(xp: Any) -> Backend:
    """The backend of the array namespace ``xp`` (:data:`GENERIC` where none fits)."""
    name = name_or_none(xp)
    return GENERIC if name is None else load(name)


def for_rng(rng: Any) -> Backend:
    """The backend whose generator type ``rng`` is: a NumPy ``Generator`` (the NumPy
    backend; array-api-strict takes the same generator), a ``torch.Generator`` or a JAX
    key. Raises ``attnkit.ArgumentTypeError`` for anything else."""
    root = type(rng).__module__.split(".")[0]
    name = {"numpy": "numpy", "torch": "torch", "jax": "jax", "jaxlib": "jax"}.get(root)
    if name is not None:
        backend = load(name)
        backend.check_rng(rng)
        return backend
    raise ArgumentTypeError(
        f"rng must be a numpy.random.Generator, a torch.Generator or a JAX PRNG key, got "
        f"{type_name(rng)}; create one with numpy.random.default_rng(seed), "
        "torch.Generator().manual_seed(seed) or jax.random.key(seed)."
    )


def compiling() -> bool:
    """Whether ``torch.compile`` (dynamo) is tracing right now; False without importing
    torch where it is not loaded."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    compiler = getattr(torch, "compiler", None)
    return compiler is not None and compiler.is_compiling()


_registry.register_backends(for_namespace, for_rng, load, compiling)
for _name in NAMES:  # their modules only (no framework): no import inside a traced call
    load(_name)
