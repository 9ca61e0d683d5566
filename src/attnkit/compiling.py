"""What the math does for ``torch.compile``, in one place.

Dynamo traces a call's Python once: no tensor value is concrete, and Python state read
during the trace is baked into the graph. So:

1. **No caches while tracing** (:func:`tracing`): a cache hit would be baked in.
2. **One operator per call** (:mod:`attnkit.compiled`): the graph does not grow with L.
3. **Sizes as Python ints** (:func:`static_ints`): the block plan is Python arithmetic,
   as under ``jax.jit``.
4. **Traceable Python**: :class:`lazy_attribute` (a ``cached_property`` without the lock
   dynamo cannot trace), and loops rather than ``max`` over a generator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["lazy_attribute", "register_tracing", "static_ints", "tracing"]

_TRACING: list[Callable[[], bool]] = []


def register_tracing(tracing: Callable[[], bool] | None) -> None:
    """Install the backends' test of whether a compiler traces the call right now
    (:func:`attnkit.registry.register_backends` passes it on)."""
    _TRACING[:] = [] if tracing is None else [tracing]


def tracing() -> bool:
    """Whether a framework's compiler is tracing this call (``torch.compile``): no
    concrete values then, and no Python caches (they would be baked into the graph).
    (Tracers of ``jax.jit`` show in the arrays themselves.)"""
    return bool(_TRACING) and _TRACING[0]()


def static_ints(sizes: Any) -> tuple[int, ...]:
    """``sizes`` (shape entries) as Python ints: under ``torch.compile`` with dynamic
    shapes this specializes them, so that the Python arithmetic of the block plan stays
    Python. Validation converts a call's sizes once; everything after reads the
    Problem's ints."""
    return tuple([int(n) for n in sizes])


class lazy_attribute:
    """A lock-free ``functools.cached_property`` (Python 3.11's takes an RLock, which
    ``torch.compile`` cannot trace): computed on first access, then kept in the
    instance's ``__dict__``, which shadows this non-data descriptor."""

    def __init__(self, fn: Any) -> None:
        self.fn, self.name, self.__doc__ = fn, fn.__name__, fn.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        value = self.fn(obj)
        obj.__dict__[self.name] = value
        return value
