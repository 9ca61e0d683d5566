"""The application on top of attnkit: the ``attnkit`` command line and what it runs.

Three layers, nothing importing upward: the math (``attnkit`` core), the backends
(``attnkit.backends.<name>``: what each framework needs beyond the array API, and its
front-ends) and this application, which may import both. It is organised by tool:
:mod:`attnkit.app.cli` (the ``attnkit`` command: demo, bench, viz, verify, explain),
:mod:`attnkit.app.bench` (``attnkit bench``, its framework workers inside it),
:mod:`attnkit.app.verify` (``attnkit verify`` and its golden vectors) and
:mod:`attnkit.app.capture` (attention captured from models for ``attnkit viz``); shared:
:mod:`attnkit.app.tables`, :mod:`attnkit.app.progress`, :mod:`attnkit.app.display` (rich
and matplotlib, optional). NumPy may be imported anywhere; a framework (torch,
transformers, jax, keras) only in the modules named for it (``*_torch``, ``*_jax``),
which the rest imports lazily. :mod:`attnkit.viz` is application code too (pictures and
the interactive page), kept at its public name.
"""

from __future__ import annotations

__all__: list[str] = []
