"""Linformer (Wang et al. 2020): attention over k projected keys instead of S keys.

Keys and values are projected along the sequence by E (k, S) and F (k, S)::

    out = softmax(scale * Q (E K)^T) (F V)          # (..., L, Ev); time and memory O(L k)

With E = F = I (k = S) this is exact attention. :func:`linformer_projections` makes
untrained projections: Gaussian (entries N(0, 1/k)) or segment means.
"""

from __future__ import annotations

import math
from typing import Any

import array_api_compat as aac

from ..attention import scaled_dot_product_attention
from ..checks import check_positive_int
from ..errors import ArgumentTypeError, ParameterError, ShapeError
from ..registry import backend_for
from ..shapes import broadcast_shapes
from ._common import check_side_array, prepare
from .segments import segment_ids

__all__ = ["PROJECTION_KINDS", "linformer", "linformer_projections"]

PROJECTION_KINDS = ("gaussian", "mean")


def linformer(
    query: Any,
    key: Any,
    value: Any,
    *,
    proj_k: Any,
    proj_v: Any = None,
    key_padding_mask: Any = None,
    scale: float | None = None,
) -> Any:
    """Linformer attention on NumPy, PyTorch, JAX or any array-API arrays.

    Args:
        query: (..., H, L, E); key: (..., H, S, E); value: (..., H, S, Ev), leading dims
            broadcast as in :func:`attnkit.scaled_dot_product_attention`.
        proj_k: E, (k, S) or (..., k, S) broadcasting with the leading dims (one
            projection per head): the sequence projection of the keys, in query's dtype.
        proj_v: F, the projection of the values, same shapes; default ``proj_k`` (the
            paper's shared key-value projection).
        key_padding_mask: bool (..., S), True = key may be attended (see
            :mod:`attnkit.approx`), or ``attnkit.masks.key_padding(lengths)``.
        scale: factor on the scores, default 1/sqrt(E).

    Returns:
        (..., H, L, Ev) in the inputs' dtype (float16/bfloat16 computed in float32).

    Equivalent plain code::

        k_, v_ = where(alive, key, 0), where(alive, value, 0)     # padded keys zeroed
        kp, vp = proj_k @ k_, proj_v @ v_                         # (..., k, E), (..., k, Ev)
        slot_alive = sum(abs(proj_k) * alive, axis=-1) > 0        # (..., k)
        out = softmax(where(slot_alive, scale * query @ kp.mT, -inf)) @ vp

    A projected slot whose row of ``proj_k`` touches no live key is masked (also without
    padding: an all-zero row), so identity projections with padding equal exact masked
    attention, and a (batch, head) with no live key gives output 0, never NaN. Time
    O(L k + k S); memory beyond the inputs and output: the projected keys and values
    (..., k, E + Ev) and one block of query rows' scores (the softmax over the k slots
    runs through attnkit's blocked exact executor).

    Raises:
        ShapeError, DTypeError, ParameterError, ArgumentTypeError (attnkit errors) before
        any work, naming the argument, its shape and the fix.
    """
    ops = prepare(query, key, value, key_padding_mask, scale)
    xp = ops.xp
    proj_v = proj_k if proj_v is None else proj_v
    for name, p in (("proj_k", proj_k), ("proj_v", proj_v)):
        check_side_array(name, p, query, xp, ops.device, floating=True)
        _check_projection(name, p, ops.lead, ops.S)
    pk, pv = (
        p if p.dtype == ops.compute_dtype else xp.astype(p, ops.compute_dtype)
        for p in (proj_k, proj_v)
    )
    kp = pk @ ops.key  # (..., k, E)
    vp = pv @ ops.value  # (..., k, Ev)
    if ops.alive is None:
        touch = xp.sum(xp.abs(pk), axis=-1)[..., None]  # (..., k, 1)
    else:
        live = xp.astype(ops.alive, ops.compute_dtype)[..., None]  # (..., S, 1)
        touch = xp.abs(pk) @ live  # (..., k, 1): weight of the live keys in each slot
    allowed = xp.matrix_transpose(touch > 0)  # (..., 1, k)
    # Exact attention over the k projected positions: the blocked executor keeps the
    # (..., L, k) scores to one block of query rows at a time.
    out = scaled_dot_product_attention(ops.query, kp, vp, attn_mask=allowed, scale=ops.scale)
    return ops.finish(out)  # (..., L, Ev)


def _check_projection(name: str, p: Any, lead: tuple[int, ...], S: int) -> None:
    shape = tuple(p.shape)
    if len(shape) < 2 or shape[-1] != S or shape[-2] < 1:
        raise ShapeError(
            f"{name} must have shape (k, S) = (k, {S}) or (..., k, {S}) with k >= 1 "
            f"projected positions, got {shape}; make it with "
            f"attnkit.approx.linformer_projections({S}, k, like=query, ...)."
        )
    if broadcast_shapes(shape[:-2], lead) is None:
        raise ShapeError(
            f"{name} of shape {shape} has leading dims {shape[:-2]} that do not broadcast "
            f"with the inputs' {lead}; use (k, S) for one projection shared by all heads."
        )


def linformer_projections(
    seq_len: int, proj_len: int, *, like: Any, rng: Any = None, kind: str = "gaussian"
) -> Any:
    """A (proj_len, seq_len) Linformer projection in ``like``'s namespace, dtype and device.

    ``kind="gaussian"`` draws entries N(0, 1/k) from ``rng`` (a NumPy Generator, a
    torch.Generator or a JAX key, for ``like``'s library): the random projection of the
    paper's Johnson-Lindenstrauss argument. ``kind="mean"`` (no rng) averages k segments
    of the sequence (split as in :mod:`attnkit.approx.segments`)::

        gaussian:  P[i, t] ~ N(0, 1/k)
        mean:      P[i, t] = 1/|segment i| if position t is in segment i, else 0

    Use the same matrix for every backend by drawing it once and converting it.
    """
    seq_len = check_positive_int("seq_len", seq_len, "pass S, the key length")
    proj_len = check_positive_int("proj_len", proj_len, "pass k, the projected length")
    if kind not in PROJECTION_KINDS:
        raise ParameterError(f"kind must be one of {PROJECTION_KINDS}, got {kind!r}.")
    if not aac.is_array_api_obj(like):
        raise ArgumentTypeError(
            f"like must be an array whose library, dtype and device the projection takes "
            f"(e.g. the query), got {type(like).__name__}."
        )
    xp, device = aac.array_namespace(like), aac.device(like)
    if not xp.isdtype(like.dtype, "real floating"):
        raise ParameterError(f"like must be a real floating array, got dtype {like.dtype}.")
    if kind == "mean":
        if proj_len > seq_len:
            raise ParameterError(
                f"kind='mean' averages proj_len={proj_len} segments of seq_len={seq_len} "
                f"positions; use proj_len <= {seq_len}."
            )
        t = xp.arange(seq_len, dtype=xp.int32, device=device)[None, :]  # (1, S)
        n = xp.full((1, 1), seq_len, dtype=xp.int32, device=device)  # (1, 1)
        seg = segment_ids(xp, t, n, proj_len)  # (1, S)
        ids = xp.arange(proj_len, dtype=xp.int32, device=device)[:, None]  # (k, 1)
        member = xp.astype(seg == ids, like.dtype)  # (k, S)
        return member / xp.sum(member, axis=-1, keepdims=True)
    if rng is None:
        raise ParameterError(
            "kind='gaussian' draws from an explicit rng: pass rng=numpy.random.default_rng(seed), "
            "torch.Generator().manual_seed(seed) or jax.random.key(seed), or kind='mean'."
        )
    adapter = backend_for(xp)
    adapter.check_rng(rng, like=like)
    draw = adapter.normal(rng, (proj_len, seq_len), dtype=like.dtype, device=device)
    return draw * (1.0 / math.sqrt(proj_len))  # (k, S)
