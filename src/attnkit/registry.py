"""Where the math finds the backend of an array namespace, without importing one.

The math asks the backend of the inputs' namespace (or of a generator) for what the array
API lacks. :mod:`attnkit.backends` registers its lookups here when ``attnkit`` is
imported, so the backends know the math and the math knows only the protocol,
:class:`attnkit.backend_protocol.MathBackend`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .compiling import register_tracing, tracing

__all__ = ["backend_for", "backend_for_rng", "backend_named", "register_backends", "tracing"]

_LOOKUPS: dict[str, Callable[[Any], Any]] = {}
_FOUND: dict[int, Any] = {}  # id(namespace) -> its backend: a lookup per call costs microseconds


def register_backends(
    for_namespace: Callable[[Any], Any],
    for_rng: Callable[[Any], Any],
    named: Callable[[str], Any],
    tracing: Callable[[], bool] | None = None,
) -> None:
    """Install the lookups: a namespace's backend, a generator's, a backend by name, and
    whether a framework is tracing the call right now (``torch.compile``)."""
    _LOOKUPS.update(namespace=for_namespace, rng=for_rng, name=named)
    register_tracing(tracing)  # attnkit.compiling: what the math does for torch.compile
    _FOUND.clear()


def _lookup(kind: str) -> Callable[[Any], Any]:
    if kind not in _LOOKUPS:
        raise RuntimeError("attnkit.backends registers its lookups on `import attnkit`")
    return _LOOKUPS[kind]


def backend_for(xp: Any) -> Any:
    """The backend of the array namespace ``xp`` (a
    :class:`attnkit.backend_protocol.MathBackend`)."""
    backend = _FOUND.get(id(xp))
    if backend is None:
        backend = _lookup("namespace")(xp)
        if not tracing():  # torch.compile: no cache filled while tracing
            _FOUND[id(xp)] = backend
    return backend


def backend_for_rng(rng: Any) -> Any:
    """The backend whose generator ``rng`` is; raises ``ArgumentTypeError`` otherwise."""
    return _lookup("rng")(rng)


def backend_named(name: str) -> Any:
    """The backend called ``name`` (``"numpy"``, ``"torch"``, ``"jax"``, ``"strict"``)."""
    return _lookup("name")(name)
