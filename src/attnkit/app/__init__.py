"""The application on top of attnkit: the ``attnkit`` command line and what it runs.

Three layers, nothing importing upward: the math (``attnkit`` core), the backends
(``attnkit.backends.<name>``: each framework's adapter, kernels and front-ends) and this
application, which may import both but never a framework itself (what needs torch or
jax is a plain function of the backend that owns the framework). :mod:`attnkit.viz` is
application code too (pictures and the interactive page), kept at its public name.

Modules: :mod:`attnkit.app.cli` (``attnkit``: demo, bench, viz, verify),
:mod:`attnkit.app.demo`, :mod:`attnkit.app.verify` and
:mod:`attnkit.app.verify_frameworks` (``attnkit verify``), :mod:`attnkit.app.golden`
(the golden vectors), :mod:`attnkit.app.bench` (``attnkit bench``),
:mod:`attnkit.app.progress`, :mod:`attnkit.app.tables`, :mod:`attnkit.app.display`
(rich and matplotlib, optional).
"""

from __future__ import annotations

__all__: list[str] = []
