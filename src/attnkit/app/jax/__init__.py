"""The application's JAX half: what the tools need of jax (and Keras on JAX).

JAX's own attention for ``attnkit bench`` and ``attnkit verify`` (:mod:`.peers`,
:mod:`.peers_grad`, :mod:`.peers_keras`) and the sharded ring attention benchmark
(:mod:`.sharding_bench`). The rest of :mod:`attnkit.app` imports these lazily, by name,
so that it loads no framework itself; this package imports no other framework package
of the application.
"""

from __future__ import annotations

__all__: list[str] = []
