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
"""

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
