"""Approximate attention written once: Linformer, Performer (FAVOR+) and Nystromformer.

Each takes the shapes of :func:`attnkit.scaled_dot_product_attention` -- query
(..., H, L, E), key (..., H, S, E), value (..., H, S, Ev) -- and returns (..., H, L, Ev)
on NumPy, PyTorch, JAX or any array-API arrays::

    from attnkit import approx

    out = approx.linformer(q, k, v, proj_k=approx.linformer_projections(S, 128, like=q, rng=rng))
    out = approx.performer(q, k, v, num_features=256, rng=rng)  # or features=W (m, E)
    out = approx.nystrom(q, k, v, num_landmarks=64)

Key padding (every method): ``key_padding_mask`` is bool (..., S) broadcasting to the
inputs' leading dims, True = the key may be attended (attnkit's bool-mask convention;
torch.nn.MultiheadAttention's is the opposite), or ``attnkit.masks.key_padding(lengths)``.
Padded keys and values are replaced by 0 before any product (NaN stored there cannot
leak), and a (batch, head) with no live key gives output 0, never NaN.

Randomness is explicit: Linformer's Gaussian projections and Performer's features are
drawn from an ``rng`` (NumPy Generator, torch.Generator or JAX key) or given as arrays, so
every backend can compute with the same matrices and give the same numbers.

Modules: :mod:`~attnkit.approx.linformer`, :mod:`~attnkit.approx.performer`,
:mod:`~attnkit.approx.random_features`, :mod:`~attnkit.approx.nystrom`,
:mod:`~attnkit.approx.segments`.

Reference
---------

`attnkit.approx` holds three approximations of softmax attention, written once against the
array API like the exact path and taking its shapes: query `(..., H, L, E)`, key
`(..., H, S, E)`, value `(..., H, S, Ev)` in, `(..., H, L, Ev)` out, on NumPy, PyTorch,
JAX and array-api-strict (float16/bfloat16 computed in float32).

| function | computes | time and memory |
|---|---|---|
| `approx.linformer(q, k, v, proj_k=E, proj_v=F)` | Linformer (Wang et al. 2020): softmax(Q (E K)^T) (F V) with sequence projections E, F of shape (k, S) | O(L k + k S) |
| `approx.performer(q, k, v, features=W)` or `rng=` | Performer FAVOR+ (Choromanski et al. 2021): positive random features, orthogonal by default; `causal=True` by chunked prefix sums | O((L + S) m E) |
| `approx.nystrom(q, k, v, num_landmarks=m)` | Nystromformer (Xiong et al. 2021): segment-mean landmarks, F pinv(A) (B V) with the iterative pseudo-inverse | O((L + S) m) |

.. code-block:: python

    import attnkit as ak
    from attnkit import approx

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 8, 1024, 64), dtype=np.float32) for _ in range(3))
    alive = np.ones((2, 1, 1024), dtype=bool)  # key padding (B, 1, S): True = may attend
    alive[1, :, 700:] = False  # batch 1 holds 700 keys

    proj = approx.linformer_projections(1024, 128, like=q, kind="mean")  # or "gaussian", rng=
    out = approx.linformer(q, k, v, proj_k=proj, key_padding_mask=alive)

    w = approx.performer_features(256, 64, rng=rng, like=q)  # (m, E), orthogonal
    out = approx.performer(q, k, v, features=w, key_padding_mask=alive)
    out = approx.performer(q, k, v, features=w, causal=True, chunk_size=128)

    out = approx.nystrom(q, k, v, num_landmarks=64, key_padding_mask=alive)
    exact = ak.scaled_dot_product_attention(q, k, v, attn_mask=alive[..., None, :])
    print(np.linalg.norm(out - exact) / np.linalg.norm(exact))  # relative Frobenius error

The same ``w`` on PyTorch gives the same numbers; ``attnkit.backends.torch.nn.approx``'s
``PerformerAttention(head_dim=64, num_features=256, causal=True, seed=0)`` holds it as a
buffer.

Semantics:

- **Key padding**, every method: `key_padding_mask` is bool `(..., S)` broadcasting to
  the inputs' leading dims, True = the key may be attended (attnkit's convention; a
  per-batch `(B, S)` mask needs its head axis, `mask[:, None, :]`), or
  `ak.masks.key_padding(lengths)`. Padded keys and values are replaced by 0 with `where`
  before any product, so NaN stored there cannot leak; a (batch, head) with no live key
  gives output 0 and gradient 0, never NaN.
- **Randomness is explicit**: Linformer's Gaussian projections and Performer's features
  are drawn from an `rng` (NumPy `Generator`, `torch.Generator`, JAX key, through the
  backend adapters) or passed as arrays, so every backend can compute with the same
  matrices and give the same numbers.
- **Linformer**: `linformer_projections(S, k, like=q, kind=...)` makes untrained
  projections, `"gaussian"` (entries N(0, 1/k), the paper's Johnson-Lindenstrauss
  argument; needs `rng`) or `"mean"` (averages of k segments, a pooling the paper lists
  among its alternatives). A projected slot whose row touches no live key is masked, so
  identity projections equal exact attention, with padding too.
- **Performer**: phi(x) = exp(W x - |x|^2 / 2) (the 1/sqrt(m) cancels); each query's
  features are divided by their maximum and the keys' by a running maximum over the
  keys read so far (the sums are rescaled when it grows, as the online softmax does):
  both factors cancel exactly between numerator and denominator, and no feature exceeds
  1. Orthogonal features: QR of E x E Gaussian blocks with the signs fixed so that
  diag(R) > 0 (Haar-distributed rows), rows rescaled by chi_E norms; QR from the array
  API `linalg` extension, or a Gram-Schmidt written in array-API operations where a
  namespace lacks it. Keys and queries are read in chunks of rows: memory per (batch,
  head) is the state (m, Ev) plus one chunk's features (C, m) and, causal, its (C, C)
  block: never L x m x Ev. Causal takes both alignments (`causal_alignment=`).
- **Nystromformer**: `num_landmarks <= min(L, S)`; L and S need not be multiples of it
  (segments differ in size by at most one). With padding, the key landmarks are the
  means of segments of the live keys only, so a padded batch gives exactly the result
  of its unpadded keys. The pseudo-inverse is the paper's iteration from
  Z0 = A^T / (||A||_1 ||A||_inf), per (batch, head); 6 iterations by default (the
  paper's). It converges to pinv(A), but rounding outside the range of a rank-deficient
  A grows about 3.25x per step once converged, and with an ill-conditioned A the exact
  pseudo-inverse amplifies noise: more iterations are not always more accurate. B V and
  F (pinv(A) B V) run through attnkit's blocked exact executor.
- `attnkit.backends.torch.nn.approx` (re-exported by `attnkit.backends.torch.nn`) has
  `LinformerAttention` (projections as parameters), `PerformerAttention` (features as a
  buffer, `redraw_features()`) and `NystromAttention`, with
  `forward(query, key, value, key_padding_mask=None)`; random matrices come from a
  `generator`, a `seed`, or torch's global generator (so `torch.manual_seed` fixes them).

What the tests pin, in float64 (`tests/test_approx.py`, `tests/test_nn_approx.py`):
Linformer with identity projections equals `ak.scaled_dot_product_attention` (measured
error 0, allowed 1e-10; with padding too); Nystrom with as many landmarks as tokens
(m = L = S = 16) and 25 iterations equals it (measured 2e-14, allowed 1e-6; also with
padding); Performer equals the plain FAVOR+ formula built densely without stabilizers
(1e-12), stays accurate in float32 where that formula underflows, and its causal form
equals the dense formula times an explicit prefix mask for both alignments, L < S and
L > S, every chunk size (1e-12); Performer's error falls as 1/sqrt(m): the RMS relative
error over 16 seeds at m = 16 .. 1024 has a fitted log-log slope of -0.47 (independent
features) and -0.51 (orthogonal), checked within [-0.6, -0.4] (inputs with
|x + y|^2 about 0.5, where the features have moderate variance); Nystrom and Linformer
equal independent references (np.array_split landmarks, the iteration written out) on
lengths that are not multiples of m; padding with NaN in the padded keys, fully masked
batches (output and gradients exactly 0), gradients on PyTorch (`gradcheck`) and JAX
equal to each other (1e-10), float16/bfloat16 on PyTorch, every error message.
`conformance/test_approx.py` (5 cases) gives every backend the same projections and
features and checks the numbers against an independent float64 oracle (float64 and
float32, NumPy, array-api-strict, PyTorch, JAX eagerly and under `jax.jit`), and the
gradients on PyTorch and JAX against finite differences of the oracle.

The examples run on NumPy arrays, with NumPy imported as ``np`` (any array library
works the same way); ``tests/test_docstrings.py`` runs them.
"""  # noqa: E501

from __future__ import annotations

from .linformer import linformer, linformer_projections
from .nystrom import iterative_pinv, nystrom
from .performer import performer
from .random_features import orthonormal_rows, performer_features
from .segments import segment_means

__all__ = [
    "iterative_pinv",
    "linformer",
    "linformer_projections",
    "nystrom",
    "orthonormal_rows",
    "performer",
    "performer_features",
    "segment_means",
]
