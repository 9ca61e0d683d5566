"""The application on top of attnkit: the ``attnkit`` command line and what it runs.

Three layers, nothing importing upward: the math (``attnkit`` core), the backends
(``attnkit.backends.<name>``: what each framework needs beyond the array API, and its
front-ends) and this application, which may import both. The application itself imports
no framework: what its tools need of one (benchmark workers, the peers that verify
compares with, golden vectors in a framework's layout, model capture) lives in one
subpackage per framework, :mod:`attnkit.app.numpy`, :mod:`attnkit.app.torch` and
:mod:`attnkit.app.jax`, each independent of the others and imported lazily, by name.
:mod:`attnkit.viz` is application code too (pictures and the interactive page), kept at
its public name.

Modules: :mod:`attnkit.app.cli` (``attnkit``: demo, bench, viz, verify),
:mod:`attnkit.app.cli.demo`, :mod:`attnkit.app.verify` and
:mod:`attnkit.app.verify.frameworks` (``attnkit verify``), :mod:`attnkit.app.verify.golden`
(the golden vectors), :mod:`attnkit.app.bench` (``attnkit bench``),
:mod:`attnkit.app.progress`, :mod:`attnkit.app.tables`, :mod:`attnkit.app.display`
(rich and matplotlib, optional).
"""

from __future__ import annotations

__all__: list[str] = []
