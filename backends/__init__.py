"""Backend adapters: the little each array library needs beyond the array API standard.

The core (``attnkit``) never imports a framework. When it needs something the standard
lacks (random numbers for dropout, today), it asks this registry for the adapter of the
inputs' namespace. Each adapter is a small module, ``attnkit.backends.<name>``, that
imports its framework lazily and exposes the same functions:

``NAME``                          the backend's name.
``check_rng(rng, like)``          raise ``attnkit.ArgumentTypeError`` unless ``rng`` is
                                  this backend's generator (NumPy ``Generator``,
                                  ``torch.Generator`` on ``like``'s device, JAX PRNG key).
``dropout_keep(rng, shape, keep_prob, *, like, stream)``
                                  a bool array of ``shape`` on ``like``'s device, each
                                  element True with probability ``keep_prob``. ``stream``
                                  numbers the draws of one call (functional generators
                                  such as JAX keys fold it in; stateful ones ignore it).
``available()``                   whether the framework imports.
``from_numpy(a, dtype)``          a NumPy array as this backend's array of ``dtype``
                                  (a dtype name such as ``"float32"``).
``to_numpy(x)``                   this backend's array as a NumPy array.
``make_rng(seed)``                a fresh generator for ``seed``.
``synchronize(x)``                wait until ``x`` is computed (for timing).
``install_hint``                  the pip command that installs the framework.
``normal(rng, shape, *, dtype, device=None)``
                                  standard normal draws (``dtype`` is the namespace's
                                  dtype object; NumPy and array-api-strict draw in
                                  float64 and cast, so they agree for one seed).
``uniform(rng, shape, low, high, *, dtype, device=None)``
                                  uniform draws on ``[low, high)``.
``namespace()``                   the backend's array-API namespace.
``split_rng(rng, n)``             ``n`` independent generators (keys) from ``rng``.

Optionally, ``recompute_block(fn, *inputs)``: ``fn()`` run so that autodiff recomputes
it in the backward pass (``torch.utils.checkpoint``, ``jax.checkpoint``) when ``inputs``
are being differentiated; the blocked executor runs each block through it.

Optionally, ``fused_attention(problem)``: the framework's own kernel for the cases where
its semantics equal attnkit's exactly, returning None elsewhere (``impl="auto"``).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import array_api_compat as _aac

__all__ = ["NAMES", "for_namespace", "for_rng", "load", "name_of", "name_or_none"]

#: Every backend attnkit ships an adapter for, in the order tables list them.
NAMES: tuple[str, ...] = ("numpy", "torch", "jax", "strict")

_cache: dict[str, ModuleType] = {}


def load(name: str) -> ModuleType:
    """Return the adapter module ``attnkit.backends.<name>`` (imports no framework)."""
    if name not in NAMES:
        raise ValueError(f"unknown backend {name!r}; expected one of {', '.join(NAMES)}.")
    module = _cache.get(name)
    if module is None:
        module = importlib.import_module(f"{__name__}.{name}")
        _cache[name] = module
    return module


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


def for_namespace(xp: Any) -> ModuleType:
    """The adapter module for the array namespace ``xp``."""
    return load(name_of(xp))


def for_rng(rng: Any) -> ModuleType:
    """The adapter whose generator type ``rng`` is: a NumPy ``Generator`` (the NumPy
    adapter; array-api-strict takes the same generator), a ``torch.Generator`` or a JAX key.
    Raises ``attnkit.ArgumentTypeError`` for anything else."""
    from attnkit.errors import ArgumentTypeError
    from attnkit.shapes import type_name

    root = type(rng).__module__.split(".")[0]
    name = {"numpy": "numpy", "torch": "torch", "jax": "jax", "jaxlib": "jax"}.get(root)
    if name is not None:
        adapter = load(name)
        adapter.check_rng(rng)
        return adapter
    raise ArgumentTypeError(
        f"rng must be a numpy.random.Generator, a torch.Generator or a JAX PRNG key, got "
        f"{type_name(rng)}; create one with numpy.random.default_rng(seed), "
        "torch.Generator().manual_seed(seed) or jax.random.key(seed)."
    )
