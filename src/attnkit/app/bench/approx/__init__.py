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

Error and speed, measured
-------------------------

`attnkit bench --approx` measures, for Linformer (k projected positions), Performer
(m orthogonal features; causal against exact causal attention) and Nystromformer
(m landmarks, 6 iterations) at k = m = 64, 128, 256, the relative Frobenius error
||out - exact||_F / ||exact||_F against exact attention, the time and the peak memory
against exact dense attention and window attention (W = 256: query i sees keys
i - 128 .. i + 128), at L = S = 1024, 4096 and 16384, and the linear growth
time(L = 16384) / time(L = 8192) (bound 2.2). Errors are measured on three kinds of
inputs: random normal q, k, v (batch 1, 8 heads, head size 64); a smooth low-rank
signal plus noise (per head, q, k, v = B(t) C + 0.1 N(0, 1), B the sines and cosines
of 1 to 4 cycles over the sequence, rank 8); and q, k, v captured by forward hooks from
layer 3 (0-based) of all-MiniLM-L6-v2 (12 heads of 32; the bundled model, offline)
reading real text, the Python Language Reference as the standard library ships it
(`pydoc_data.topics`, about 128k tokens): MiniLM reads at most 512 positions, so the
text runs as consecutive 512-token windows whose q, k, v are concatenated to L tokens
(no text is repeated at these lengths; positions restart every 512 tokens). Times are
on random inputs, the median of 3 calls after a warm-up, each measurement in its own
process (its peak resident memory during the calls over what it held just before
them). `attnkit bench --approx --quick` runs the same at tiny sizes in seconds
(`tests/test_approx.py` runs it).

Measured with `attnkit bench --approx --backend torch --backend numpy --json approx.json`
(about 20 minutes; errors computed on PyTorch) on the project's machine type: an Intel
Xeon VM, 2 cores, 24 GiB. The machine is shared with other work and its timings are
noisy: the same job measured minutes apart differed by several times in absolute time
while other processes ran, so compare within a run; the growth ratios time the two
lengths alternately and divide the fastest samples for that reason. The figures below
were measured when the workers ran with `attnkit bench`'s tuned allocator settings, as
the report's header says; the workers now run in the caller's environment (see
``attnkit.app.bench``), so a run today prints that instead and its growth ratios may be
larger.

::

    attnkit bench --approx (full)
    Intel(R) Xeon(R) Processor, 2 cores; python 3.11.7, attnkit 0.1.0, numpy 2.4.6, torch 2.13.0+cpu,
      jax 0.10.2, jaxlib 0.10.2, array-api-strict 2.6.1, array-api-compat 1.16.0
    worker processes: MALLOC_TRIM_THRESHOLD_=1073741824 MALLOC_MMAP_THRESHOLD_=33554432
      GLIBC_TUNABLES=glibc.malloc.hugetlb=1 THP_MEM_ALLOC_ENABLE=1; the growth jobs also
      MALLOC_MMAP_MAX_=0 (see attnkit.app.bench.worker)

    Relative Frobenius error of the output against exact attention (torch, float32; performer causal
      against exact causal attention), on inputs:
      random: q, k, v ~ N(0, 1), (1, 8, L, 64)
      low-rank: smooth rank-8 signal (sines/cosines of 1-4 cycles over L, unit size) + N(0, 0.1^2)
        noise, (1, 8, L, 64)
      MiniLM: all-MiniLM-L6-v2 layer 3 (0-based) q/k/v, 12 heads x 32, on the Python Language Reference
        text (pydoc_data.topics): consecutive 512-token windows concatenated to L, (1, 12, L, 32)

    method                    random L=1024  random L=4096  random L=16384  low-rank L=1024  low-rank L=4096  low-rank L=16384  MiniLM L=1024  MiniLM L=4096  MiniLM L=16384
    ------------------------  -------------  -------------  --------------  ---------------  ---------------  ----------------  -------------  -------------  --------------
    exact dense               0 (ref)        0 (ref)        0 (ref)         0 (ref)          0 (ref)          0 (ref)           0 (ref)        0 (ref)        0 (ref)
    window W=256              1.8            3.81           7.75            1.92             2.8              2.93              0.612          0.841          0.938
    linformer gaussian k=64   51.7           256            1.12e+03        9.99             24.2             48.2              13.5           29.1           58.4
    linformer gaussian k=128  26.8           160            757             5.78             16.2             34.5              9.17           19.6           41.7
    linformer gaussian k=256  10.6           90.5           491             2.85             10.9             24.7              6.35           14.1           29.4
    linformer mean k=64       0.778          0.787          0.796           0.00691          0.00658          0.00653           0.587          0.634          0.708
    linformer mean k=128      0.762          0.784          0.795           0.00235          0.00179          0.00167           0.532          0.594          0.674
    linformer mean k=256      0.727          0.776          0.793           0.00147          0.000831         0.000548          0.465          0.551          0.639
    performer m=64            3.81           6.12           6.73            1.44             1.44             1.44              0.81           0.719          0.684
    performer m=128           3.81           5.38           6.48            1.31             1.32             1.31              0.789          0.697          0.668
    performer m=256           3.62           5.06           6.17            1.19             1.19             1.2               0.726          0.656          0.624
    performer causal m=64     2.21           3.35           3.81            0.84             0.841            0.84              0.935          0.816          0.725
    performer causal m=128    2.11           3              3.73            0.718            0.718            0.718             0.903          0.79           0.709
    performer causal m=256    2.04           2.81           3.58            0.653            0.653            0.654             0.838          0.734          0.666
    nystrom m=64              0.763          0.789          0.796           0.0202           0.0212           0.0215            0.373          0.404          0.538
    nystrom m=128             0.702          0.783          0.796           0.0193           0.021            0.0215            0.308          0.349          0.456
    nystrom m=256             0.588          0.761          0.794           0.018            0.0206           0.0214            0.233          0.297          0.376

    Time and memory on random normal, batch 1, 8 heads, head size 64, float32; time is the median of the
      calls after a warm-up, memory the job process's peak resident memory during the calls over what it
      held just before them ('-' when not isolated: --isolate all); the last column is the fastest time
      at the largest L over the fastest at half of it, the two timed alternately.

    torch: time (median, ms) and peak memory over the inputs (MiB)
    method                    ms L=1024  ms L=4096  ms L=16384  MiB L=1024  MiB L=4096  MiB L=16384  L=16384/L=8192
    ------------------------  ---------  ---------  ----------  ----------  ----------  -----------  --------------
    exact dense               12.24      150.2      2860        7           3           75           3.63
    window W=256              8.299      26.04      96.31       21          16          117          2.24
    linformer gaussian k=64   2.282      7.65       26.14       17          15          79           2.02
    linformer gaussian k=128  3.075      16.54      85.73       13          7           127          2.05
    linformer gaussian k=256  6.661      29.42      108.4       17          31          103          2.07
    linformer mean k=64       3.022      8.929      36.18       9           12          72           2.01
    linformer mean k=128      5.132      11.2       70.06       16          4           76           2.01
    linformer mean k=256      7.399      24.22      151.5       17          21          117          2.10
    performer m=64            5.739      17.96      89          19          90          142          2.02
    performer m=128           8.933      27.73      112.1       23          86          132          2.08
    performer m=256           12.41      50.15      190.5       78          80          154          2.15
    performer causal m=64     13.04      44.32      197.4       12          12          128          1.74
    performer causal m=128    10.07      69.61      186.2       14          22          130          1.74
    performer causal m=256    31         61.78      312.1       17          29          138          2.00
    nystrom m=64              3.988      10.49      33.54       17          11          81           1.96
    nystrom m=128             9.494      22.31      69.37       19          19          91           1.98
    nystrom m=256             39.24      53.44      119.1       89          55          119          1.61

    numpy: time (median, ms) and peak memory over the inputs (MiB)
    method                    ms L=1024  ms L=4096  ms L=16384  MiB L=1024  MiB L=4096  MiB L=16384  L=16384/L=8192
    ------------------------  ---------  ---------  ----------  ----------  ----------  -----------  --------------
    exact dense               23.43      232.1      5825        8           13          105          4.44
    window W=256              13.33      49.35      226.8       3           9           99           1.99
    linformer gaussian k=64   5.308      25.82      111.3       1           7           91           1.92
    linformer gaussian k=128  6.27       42.37      192.3       4           6           84           1.98
    linformer gaussian k=256  10.32      42.4       236.6       3           3           89           1.83
    linformer mean k=64       8.901      26.04      85.03       3           9           95           2.07
    linformer mean k=128      9.275      30.57      118.5       4           10          90           1.91
    linformer mean k=256      14.2       51.03      261.9       5           3           85           1.86
    performer m=64            9.933      43         192.9       9           21          115          2.02
    performer m=128           13.93      49.07      230.5       13          7           113          1.98
    performer m=256           24.12      95.24      395.4       15          9           109          2.02
    performer causal m=64     13.61      59.08      315.1       5           9           99           1.98
    performer causal m=128    20.99      91.74      404         7           9           107          2.06
    performer causal m=256    36.82      206        561.1       9           19          121          2.00
    nystrom m=64              9.275      37.88      159.1       3           11          109          1.95
    nystrom m=128             23.59      45.04      189         4           12          108          1.97
    nystrom m=256             59.92      138.9      359         19          26          114          1.90

    Linear growth (time at the largest L over half of it):
    linear growth  torch  exact dense  time(L=16384) / time(L=8192) = 3.63  quadratic: not judged
    linear growth  torch  window W=256  time(L=16384) / time(L=8192) = 2.24  (bound <= 2.2)  NOT MET
    linear growth  torch  linformer gaussian k=64  time(L=16384) / time(L=8192) = 2.02  (bound <= 2.2)  MET
    linear growth  torch  linformer gaussian k=128  time(L=16384) / time(L=8192) = 2.05  (bound <= 2.2)  MET
    linear growth  torch  linformer gaussian k=256  time(L=16384) / time(L=8192) = 2.07  (bound <= 2.2)  MET
    linear growth  torch  linformer mean k=64  time(L=16384) / time(L=8192) = 2.01  (bound <= 2.2)  MET
    linear growth  torch  linformer mean k=128  time(L=16384) / time(L=8192) = 2.01  (bound <= 2.2)  MET
    linear growth  torch  linformer mean k=256  time(L=16384) / time(L=8192) = 2.10  (bound <= 2.2)  MET
    linear growth  torch  performer m=64  time(L=16384) / time(L=8192) = 2.02  (bound <= 2.2)  MET
    linear growth  torch  performer m=128  time(L=16384) / time(L=8192) = 2.08  (bound <= 2.2)  MET
    linear growth  torch  performer m=256  time(L=16384) / time(L=8192) = 2.15  (bound <= 2.2)  MET
    linear growth  torch  performer causal m=64  time(L=16384) / time(L=8192) = 1.74  (bound <= 2.2)  MET
    linear growth  torch  performer causal m=128  time(L=16384) / time(L=8192) = 1.74  (bound <= 2.2)  MET
    linear growth  torch  performer causal m=256  time(L=16384) / time(L=8192) = 2.00  (bound <= 2.2)  MET
    linear growth  torch  nystrom m=64  time(L=16384) / time(L=8192) = 1.96  (bound <= 2.2)  MET
    linear growth  torch  nystrom m=128  time(L=16384) / time(L=8192) = 1.98  (bound <= 2.2)  MET
    linear growth  torch  nystrom m=256  time(L=16384) / time(L=8192) = 1.61  (bound <= 2.2)  MET
    linear growth  numpy  exact dense  time(L=16384) / time(L=8192) = 4.44  quadratic: not judged
    linear growth  numpy  window W=256  time(L=16384) / time(L=8192) = 1.99  (bound <= 2.2)  MET
    linear growth  numpy  linformer gaussian k=64  time(L=16384) / time(L=8192) = 1.92  (bound <= 2.2)  MET
    linear growth  numpy  linformer gaussian k=128  time(L=16384) / time(L=8192) = 1.98  (bound <= 2.2)  MET
    linear growth  numpy  linformer gaussian k=256  time(L=16384) / time(L=8192) = 1.83  (bound <= 2.2)  MET
    linear growth  numpy  linformer mean k=64  time(L=16384) / time(L=8192) = 2.07  (bound <= 2.2)  MET
    linear growth  numpy  linformer mean k=128  time(L=16384) / time(L=8192) = 1.91  (bound <= 2.2)  MET
    linear growth  numpy  linformer mean k=256  time(L=16384) / time(L=8192) = 1.86  (bound <= 2.2)  MET
    linear growth  numpy  performer m=64  time(L=16384) / time(L=8192) = 2.02  (bound <= 2.2)  MET
    linear growth  numpy  performer m=128  time(L=16384) / time(L=8192) = 1.98  (bound <= 2.2)  MET
    linear growth  numpy  performer m=256  time(L=16384) / time(L=8192) = 2.02  (bound <= 2.2)  MET
    linear growth  numpy  performer causal m=64  time(L=16384) / time(L=8192) = 1.98  (bound <= 2.2)  MET
    linear growth  numpy  performer causal m=128  time(L=16384) / time(L=8192) = 2.06  (bound <= 2.2)  MET
    linear growth  numpy  performer causal m=256  time(L=16384) / time(L=8192) = 2.00  (bound <= 2.2)  MET
    linear growth  numpy  nystrom m=64  time(L=16384) / time(L=8192) = 1.95  (bound <= 2.2)  MET
    linear growth  numpy  nystrom m=128  time(L=16384) / time(L=8192) = 1.97  (bound <= 2.2)  MET
    linear growth  numpy  nystrom m=256  time(L=16384) / time(L=8192) = 1.90  (bound <= 2.2)  MET

What the numbers say:

- **Random inputs**: no method is close. Without structure the attention matrix is
  close to full rank and the exact output is a near-uniform average of many values,
  small and shrinking with L; the segment-mean Linformer and Nystrom return roughly that
  average (errors 0.59 to 0.80), while window attention and Performer put their weight
  on fewer keys, and their error exceeds 1 and grows with L.
- **Smooth low-rank signal**: pooling is near exact. The segment-mean Linformer reaches
  5.5e-4 at k = 256 and L = 16384 (1.7e-3 to 6.9e-3 at k = 64 and 128); Nystrom stays
  near 2e-2 at every m because its 6-iteration pseudo-inverse, not m, limits it (at
  L = 1024, m = 64: 2.0e-2 with 6 iterations, 2.5e-3 with 10, 1.3e-3 with 20, and an
  overflow with 40, where float32 rounding has grown past the converged inverse);
  Performer (1.2 to 1.4) and the window (1.9 to 2.9) do not capture it.
- **MiniLM on real text**: Nystrom is best (0.23 at m = 256 and L = 1024, 0.38 to 0.54
  at L = 16384), then the segment-mean Linformer (0.47 to 0.71), Performer (0.62 to
  0.81; causal 0.67 to 0.94) and the window (0.61 to 0.94). None comes within 20 % of
  exact attention on a real model's queries and keys.
- **Untrained Gaussian Linformer projections are useless** (errors 2.9 to 1100): each
  projected key sums S/k keys with N(0, 1/k) weights, so the scores grow like
  sqrt(S/k); the paper learns E and F (`LinformerAttention` holds them as parameters).
- **Performer** needs many features at these scales: the variance of its estimate of
  exp(x . y) grows like exp(|x + y|^2), and |x|^2 = |q|^2 / sqrt(E) is about 8 for
  unit-variance entries at head size 64, so 256 features are far too few and the error
  falls slowly with m (6.7 to 6.2 on random inputs, 1.44 to 1.19 on the low-rank ones);
  where |x + y|^2 is small, the error falls as 1/sqrt(m) (``tests/test_approx.py``).
- **Time**: at L = 16384 exact dense attention takes 2.9 s on PyTorch and 5.8 s on
  NumPy, the approximations 26 to 312 ms and 85 to 561 ms. Memory over the inputs at
  L = 16384: 72 to 154 MiB for every approximation, mostly the output (32 MiB) and
  the allocator's reuse of freed blocks; Performer's chunks bound its working set.
  Exact dense attention is blocked too (75 and 105 MiB).
- **Linear growth**: 31 of the 32 linear lines meet time(16384) / time(8192) <= 2.2 in
  this run, 29 of them between 1.8 and 2.1; window attention on PyTorch is at 2.24. In
  the run before it, with the same growth jobs, all 32 met the bound (1.61 to 2.12).
  Exact dense attention is quadratic (3.6 and 4.4). Two causes of superlinear growth
  were found and removed: the NumPy kernel now flushes exponentials that would
  be subnormal (untrained Gaussian Linformer projections give scores growing like
  sqrt(S/k), and at L = 16384 0.4 % of the weights were subnormal, which made the value
  product three times slower: growth 2.4), and the growth jobs take every block from
  glibc's heap (the 32 MiB output at L = 16384 was otherwise mapped and zeroed afresh on
  every call, see ``attnkit.app.bench``). What is left is the machine's noise: the same job
  measured twice minutes apart moves its ratio by up to 0.25.
- **Since this run** PyTorch's window attention goes through the run kernel (the
  interior of the window in one SDPA call; see ``attnkit.app.bench``'s targets: 38 ms at L = 8192 and
  growth 1.59 there). A later `--approx` run on the same machine met all 16 NumPy lines
  (1.71 to 2.07) but only 11 of 16 PyTorch lines: the window at 2.48, and three
  Linformer lines and one causal Performer line, whose code had not changed, at 2.22
  to 2.71. Those are calls of 26 to 120 ms at L = 16384, where the machine's noise
  weighs most; timed alternately in one process, the window's growth measured 1.45 to
  2.11 (medians of 7 calls, four rounds).

"""  # noqa: E501

from __future__ import annotations

__all__: list[str] = []
