"""``attnkit bench``: time attnkit against each framework's own attention, in one run.

Modules, in the order a run uses them: :mod:`~attnkit.app.bench.settings` (the options
and the plan of jobs), :mod:`~attnkit.app.bench.cases` (cases, jobs, measurements, and
each backend's baselines: ``attnkit.app.<name>.peers``),
:mod:`~attnkit.app.bench.worker` (each job in its own interpreter, ``python -m
attnkit.app.bench.worker``, with the allocator settings), :mod:`~attnkit.app.bench.measure`
(one job: warm-up, timing, peak memory, the check against float64),
:mod:`~attnkit.app.bench.targets` (the performance targets 1-8 and their verdict lines),
:mod:`~attnkit.app.bench.machine` and :mod:`~attnkit.app.bench.report` (the report).
``attnkit bench --approx`` is :mod:`attnkit.app.bench.approx`; ``attnkit bench --hf`` is
:mod:`attnkit.app.bench.hf`. None of them imports a framework.
"""

from __future__ import annotations

__all__: list[str] = []
