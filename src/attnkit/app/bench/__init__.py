"""``attnkit bench``: time attnkit against each framework's own attention, in one run.

Modules, in the order a run uses them: :mod:`~attnkit.app.bench.settings` (the options
and the plan of jobs), :mod:`~attnkit.app.bench.cases` (cases, jobs, measurements, and
each backend's baselines: ``peers_numpy``, ``peers_torch``, ``peers_jax``),
:mod:`~attnkit.app.bench.worker` (each job in its own interpreter, ``python -m
attnkit.app.bench.worker``, with the allocator settings), :mod:`~attnkit.app.bench.measure`
(one job: warm-up, timing, peak memory, the check against float64),
:mod:`~attnkit.app.bench.targets` (the performance targets and their verdict lines),
:mod:`~attnkit.app.bench.machine` and :mod:`~attnkit.app.bench.report` (the report).
The other modes: ``--approx`` (:mod:`attnkit.app.bench.approx`), ``--hf``
(:mod:`~attnkit.app.bench.hf`), ``--backward`` (:mod:`~attnkit.app.bench.backward`),
``--forms`` (:mod:`~attnkit.app.bench.forms`), ``--devices``
(:mod:`~attnkit.app.bench.distributed`), ``--viz`` (:mod:`~attnkit.app.bench.viz_page`).
Only the modules named for a framework (``*_torch``, ``*_jax``) import it; the workers
load them, the command never does.

::

    attnkit bench --targets     # exactly the targets below (3 rounds)
    attnkit bench --targets --tuned-env   # the same with a tuned allocator (said on every line)
    attnkit bench               # dense L = 1024, 4096; window 256 at 8192, 16384; one decoding step
    attnkit bench --quick       # the same at tiny sizes (nox -s bench runs it)
    attnkit bench --backend torch --lengths 1024,2048,4096 --flex --json out.json --plot out.png

On every installed backend, attnkit (``impl="auto"`` and ``impl="generic"``) is timed
against the framework's own attention: torch ``F.scaled_dot_product_attention`` (a window
as a dense bool band mask), FlexAttention under ``torch.compile`` (``--flex``; its compile
time apart), ``jax.nn.dot_product_attention`` under ``jax.jit``, and the textbook
softmax(QK^T/sqrt(E))V in NumPy, PyTorch and JAX. Inputs: random normal, batch 1, 8 heads,
head size 64, float32. "Window W": query i sees keys i - W/2 .. i + W/2.

The targets (data in :mod:`~attnkit.app.bench.targets`; each a ratio of two times of
the same run, except 7):

| target | case | bound |
|---|---|---|
| 1 | dense torch L = 4096 (and causal) | auto / torch SDPA <= 1.05; generic / torch SDPA <= 1.5 |
| 2 | dense numpy L = 4096 | auto / numpy textbook <= 0.3 |
| 3 | dense jax L = 4096 | auto / `jax.nn.dot_product_attention` <= 0.7 |
| 4 | window 256 torch L = 8192 | auto / SDPA band mask <= 0.06; auto / FlexAttention compiled < 1; forward + backward runs |
| 5 | window 256 numpy, jax L = 8192 | window / dense at the same L (auto) <= 0.12 |
| 6 | window 256, every backend | time(L = 16384) / time(L = 8192) (auto) <= 2.2 |
| 7 | dense numpy, torch, jax L = 32768, one call | peak resident memory < 2 GiB |
| 8 | decode torch L = 1, S = 1024 (and padded) | auto / torch SDPA <= 1.3 |

Method: warm-up, then the median of ``--repeats`` samples, synchronized after each call
(with ``--rounds R``, the median of R interleaved rounds; the table shows their spread).
Each result is checked against the float64 formula on a few rows, so a path computing
something else reports an error, not a time. Each measurement runs in its own interpreter
(``--isolate all``), so its peak resident memory is its own; workers run in the caller's
environment, or with a tuned allocator under ``--tuned-env`` (said on every line). Each
target prints one line: the ratio, the bound, MET / NOT MET, or SKIPPED with the reason;
``--quick`` judges nothing. Exit status 1 only when attnkit failed or was wrong.
"""  # noqa: E501

from __future__ import annotations

__all__: list[str] = []
