"""Approximate attention written once: Linformer, Performer (FAVOR+) and Nystromformer.

Each takes the shapes of :func:`attnkit.scaled_dot_product_attention` -- query
`(..., H, L, E)`, key `(..., H, S, E)`, value `(..., H, S, Ev)` -- and returns
`(..., H, L, Ev)` on NumPy, PyTorch, JAX or any array-API arrays (float16/bfloat16
computed in float32).

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
    out = approx.performer(q, k, v, features=w, causal=True, chunk_size=128)
    out = approx.nystrom(q, k, v, num_landmarks=64, key_padding_mask=alive)

- **Key padding**, every method: `key_padding_mask` is bool `(..., S)` broadcasting to
  the inputs' leading dims, True = the key may be attended (a `(B, S)` mask needs its
  head axis, `mask[:, None, :]`), or `ak.masks.key_padding(lengths)`. NaN stored in
  padding cannot leak; a (batch, head) with no live key gives output 0 and gradient 0.
- **Randomness is explicit**: projections and features are drawn from an `rng` or passed
  as arrays, so every backend can compute with the same matrices.
- **Linformer**: a projected slot whose row touches no live key is masked, so identity
  projections equal exact attention, with padding too (:mod:`.linformer`).
- **Performer**: no feature exceeds 1; memory per (batch, head) is the state (m, Ev) plus
  one chunk's features; causal takes both alignments (:mod:`.performer`).
- **Nystromformer**: `num_landmarks <= min(L, S)`, any L and S; a padded batch gives
  exactly the result of its unpadded keys; 6 pseudo-inverse iterations by default
  (:mod:`.nystrom`).

The PyTorch modules: :mod:`attnkit.backends.torch.nn.approx`. NumPy is imported as
``np``.
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
