"""``attnkit bench --approx``: how far, how fast and how big the approximate attentions are.

For Linformer (Gaussian and segment-mean projections, k projected positions), Performer
(m orthogonal random features; non-causal, and causal against exact causal attention)
and Nystromformer (m landmarks, 6 pseudo-inverse iterations), at lengths L = S and
k = m = 64, 128, 256 (:data:`LENGTHS`, :data:`PARAMS`), this measures

- **error**: the relative Frobenius error ||out - exact||_F / ||exact||_F of the output
  against exact attention (``attnkit.scaled_dot_product_attention``, computed in the same
  float32), on three kinds of inputs (:mod:`attnkit.app.bench.approx.inputs`): random
  normal q, k, v; a smooth low-rank signal plus noise; and q, k, v captured from a real model
  (MiniLM) on real text. Exact dense attention (the reference, error 0) and window
  attention (W = 256, query i sees keys i - 128 .. i + 128) are listed alongside;
- **time**: the median of ``repeats`` calls after a warm-up (compilation excluded), with
  ``attnkit bench``'s timing loop (:func:`attnkit.app.bench.measure.timed`), on random
  inputs (batch 1, 8 heads, head size 64); the random matrices (projections, features)
  are drawn before the clock starts;
- **memory**: the peak resident memory of the job's own process during the calls, over
  what it held just before them with the inputs and matrices made (on Linux the
  high-water mark is reset at that point, so freed temporaries of the input conversion
  cannot hide the working memory; elsewhere the peak so far is the baseline);
- **linear growth**: time(L) / time(L/2) at the largest L, which a method linear in L
  keeps near 2 (the bound checked is 2.2; dense attention is quadratic: about 4). The
  two sizes run in one process, timed alternately, and the ratio of the two fastest
  samples is reported (load on a shared machine only ever adds time, and alternating
  exposes both sides to it alike; ``attnkit bench --targets`` keeps fastest rounds too).

Modules: ``cases`` (methods, jobs), ``measure`` (the time and memory of a job),
``worker`` (a job in its own process), ``inputs`` (the error's three kinds of inputs),
``errors`` (the errors against exact attention), ``report`` (``attnkit bench --approx``).
Framework code lives in ``attnkit.backends``; none of these modules imports a framework.
"""

from __future__ import annotations

__all__: list[str] = []
