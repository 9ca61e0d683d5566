"""Random feature matrices W (m, E) for Performer's FAVOR+ softmax kernel.

Every row is marginally N(0, I_E), so the positive random features are unbiased.
Orthogonal features (Choromanski et al. 2021, section 2.4) make the rows of each block of
E exactly orthogonal::

    G_b ~ N(0, 1)^(E x E)                                # Gaussian blocks
    Q_b R_b = G_b                                        # QR, signs fixed so diag(R_b) > 0
    W = diag(|g_i|) (rows of Q_b^T, stacked, first m)    # chi_E row norms, g_i ~ N(0, I_E)

QR from the array API ``linalg`` extension, else a Gram-Schmidt in array-API operations.
"""

from __future__ import annotations

from typing import Any

import array_api_compat as aac

from ..checks import check_flag, check_positive_int
from ..errors import ArgumentTypeError, ParameterError
from ..registry import backend_for

__all__ = ["orthonormal_rows", "performer_features"]


def performer_features(
    num_features: int, head_dim: int, *, rng: Any, like: Any, orthogonal: bool = True
) -> Any:
    """Random features W (num_features, head_dim) for :func:`attnkit.approx.performer`.

    Args:
        num_features: m, the number of random features (rows).
        head_dim: E, the query/key features.
        rng: a NumPy Generator (NumPy and array-api-strict), a torch.Generator on
            ``like``'s device, or a JAX key; the same state gives the same W.
        like: an array whose library, device and dtype W takes (e.g. the query);
            float16/bfloat16 draw in float32 (cast W to the query's dtype before use).
        orthogonal: orthogonal random features (default) or independent Gaussian rows.

    Returns:
        W (m, E), each row marginally N(0, I_E); with ``orthogonal`` the rows of each
        block of E rows are exactly orthogonal, with chi_E-distributed norms.
    """
    m = check_positive_int("num_features", num_features, "pass m, the number of features")
    E = check_positive_int("head_dim", head_dim, "pass E, the query/key feature size")
    check_flag("orthogonal", orthogonal)
    if not aac.is_array_api_obj(like):
        raise ArgumentTypeError(
            f"like must be an array whose library, dtype and device the features take "
            f"(e.g. the query), got {type(like).__name__}."
        )
    if rng is None:
        raise ParameterError(
            "performer_features draws from an explicit rng: pass "
            "rng=numpy.random.default_rng(seed), torch.Generator().manual_seed(seed) or "
            "jax.random.key(seed) (or give features= to performer directly)."
        )
    xp, device = aac.array_namespace(like), aac.device(like)
    if not xp.isdtype(like.dtype, "real floating"):
        raise ParameterError(f"like must be a real floating array, got dtype {like.dtype}.")
    dtype = like.dtype if like.dtype in (xp.float32, xp.float64) else xp.float32
    adapter = backend_for(xp)
    adapter.check_rng(rng, like=like)
    if not orthogonal:
        return adapter.normal(rng, (m, E), dtype=dtype, device=device)  # (m, E)
    blocks_rng, norms_rng = adapter.split_rng(rng, 2)
    blocks = -(-m // E)
    gauss = adapter.normal(blocks_rng, (blocks, E, E), dtype=dtype, device=device)
    rows = xp.reshape(orthonormal_rows(gauss), (blocks * E, E))[:m, :]  # (m, E)
    g = adapter.normal(norms_rng, (m, E), dtype=dtype, device=device)  # (m, E)
    norms = xp.sqrt(xp.sum(g * g, axis=-1, keepdims=True))  # (m, 1) ~ chi_E
    return rows * norms  # (m, E)


def orthonormal_rows(a: Any) -> Any:
    """Q^T for the QR of each (E, E) matrix of ``a`` (..., E, E), with diag(R) > 0.

    The rows of the result are orthonormal: Gram-Schmidt applied to the columns of
    ``a``, returned as rows. Uses ``xp.linalg.qr`` when the namespace has the linalg
    extension, else :func:`_gram_schmidt` (the same Q, up to rounding)."""
    xp = aac.array_namespace(a)
    linalg = getattr(xp, "linalg", None)
    if linalg is None or not hasattr(linalg, "qr"):
        return xp.matrix_transpose(_gram_schmidt(a))
    q, r = linalg.qr(a)  # (..., E, E), (..., E, E)
    diag = linalg.diagonal(r) if hasattr(linalg, "diagonal") else _diagonal(xp, r)  # (..., E)
    sign = 1.0 - 2.0 * xp.astype(diag < 0, diag.dtype)  # (..., E) -1 or 1; a 0 pivot: 1
    return xp.matrix_transpose(q * sign[..., None, :])  # (..., E, E)


def _diagonal(xp: Any, r: Any) -> Any:
    E = r.shape[-1]
    eye = xp.eye(E, dtype=r.dtype, device=aac.device(r))
    return xp.sum(r * eye, axis=-1)  # (..., E)


def _gram_schmidt(a: Any) -> Any:
    """Q of the QR of ``a`` (..., E, E) by modified Gram-Schmidt over its columns."""
    xp = aac.array_namespace(a)
    cols = []
    for j in range(a.shape[-1]):
        v = a[..., :, j]  # (..., E)
        for u in cols:
            v = v - xp.sum(u * v, axis=-1, keepdims=True) * u
        cols.append(v / xp.sqrt(xp.sum(v * v, axis=-1, keepdims=True)))
    return xp.stack(cols, axis=-1)  # (..., E, E)
