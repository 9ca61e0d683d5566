"""``attnkit bench --approx``: how far, how fast and how big the approximate attentions are.

For Linformer (Gaussian and segment-mean projections, k projected positions), Performer
(m orthogonal random features; non-causal, and causal against exact causal attention)
and Nystromformer (m landmarks, 6 pseudo-inverse iterations), at lengths L = S and
k = m = 64, 128, 256 (:data:`LENGTHS`, :data:`PARAMS`), this measures

- **error**: the relative Frobenius error ||out - exact||_F / ||exact||_F of the output
  against exact attention (``attnkit.scaled_dot_product_attention``, computed in the same
  float32), on three kinds of inputs (:mod:`attnkit.app.bench.approx.inputs`): random
  normal q, k, v; a smooth low-rank signal plus noise; and q, k, v captured from a real model
  (MiniLM, :mod:`~attnkit.app.bench.approx.minilm_qkv_torch`) on real text. Exact dense
  attention (the reference, error 0) and window attention (W = 256, query i sees keys
  i - 128 .. i + 128) are listed alongside;
- **time**: the median of ``repeats`` calls after a warm-up, with
  :func:`attnkit.app.bench.measure.timed`, on random inputs (batch 1, 8 heads, head size
  64), the random projections and features drawn before the clock starts;
- **memory**: the job process's peak resident memory during the calls, over what it
  held just before them;
- **linear growth**: time(L) / time(L/2) at the largest L (bound 2.2; about 4 for dense
  attention), the two sizes timed alternately in one process, fastest samples divided.

Modules: ``cases`` (methods, jobs), ``measure`` (the time and memory of a job),
``worker`` (a job in its own process), ``inputs`` (the error's three kinds of inputs),
``errors`` (the errors against exact attention), ``report`` (``attnkit bench --approx``).
Only ``minilm_qkv_torch`` imports a framework (torch and transformers, for MiniLM).

::

    attnkit bench --approx --backend torch --backend numpy --json approx.json
    attnkit bench --approx --quick      # the same at tiny sizes (tests/test_approx.py runs it)
"""

from __future__ import annotations

__all__: list[str] = []
