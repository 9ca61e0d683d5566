"""Performer (Choromanski et al. 2021): softmax attention through positive random features.

FAVOR+ writes the softmax kernel as an expectation over Gaussian w, with x and y the
query and key scaled so that x . y = scale * q . k::

    exp(x . y) = E_w[phi(x) . phi(y)],   phi(x)_i = exp(w_i . x - |x|^2 / 2) / sqrt(m)

and replaces the expectation by m random features W (m, E) (:func:`performer_features`).
Attention then costs O((L + S) m E) instead of O(L S E)::

    out = phi(Q) (phi(K)^T V) / (phi(Q) (phi(K)^T 1))        # (..., L, Ev)

Numerical safety: each query's features are multiplied by exp(-max_i(w_i . x - |x|^2/2))
(one constant per query row) and all keys' features by exp(-max over live keys and
features), one constant per (batch, head). Both factors cancel exactly between the
numerator and the denominator, and every feature is then <= 1, so nothing overflows.
The 1/sqrt(m) cancels the same way and is left out.

Causal: query i may attend keys j <= i (``top_left``) or j <= i + S - L
(``bottom_right``). The prefix sums sum_{j <= i} phi(k_j) v_j^T are never stored per
position: queries go in chunks of C rows; keys before the chunk are folded into a running
state (..., m, Ev), keys inside it are handled with a masked (..., C, C) block::

    out_chunk = (phi(Q_c) state + tril(phi(Q_c) phi(K_c)^T) V_c) / (same with 1 for V)
"""

from __future__ import annotations

import math
from typing import Any

from .._shapes import broadcast_shapes
from .._validate import ALIGNMENTS
from ..errors import ParameterError, ShapeError
from ._common import (
    Operands,
    check_bool,
    check_positive_int,
    check_side_array,
    prepare,
    safe_divide,
)
from .random_features import performer_features

__all__ = ["performer"]


def performer(
    query: Any,
    key: Any,
    value: Any,
    *,
    features: Any = None,
    num_features: int = 256,
    rng: Any = None,
    orthogonal: bool = True,
    causal: bool = False,
    causal_alignment: str = "top_left",
    chunk_size: int = 128,
    key_padding_mask: Any = None,
    scale: float | None = None,
) -> Any:
    """Performer (FAVOR+) attention on NumPy, PyTorch, JAX or any array-API arrays.

    Args:
        query: (..., H, L, E); key: (..., H, S, E); value: (..., H, S, Ev), leading dims
            broadcast as in :func:`attnkit.scaled_dot_product_attention`.
        features: W (m, E) or (..., m, E) broadcasting with the leading dims, in query's
            dtype: give the same W to every backend for the same numbers. When None, W is
            drawn with :func:`performer_features` from ``rng``.
        num_features, rng, orthogonal: m, the generator (NumPy Generator, torch.Generator
            or JAX key of the inputs' library) and the kind of features drawn when
            ``features`` is None; ignored otherwise.
        causal: query i attends keys up to its own position, with ``causal_alignment``
            ``"top_left"`` (j <= i) or ``"bottom_right"`` (j <= i + S - L).
        chunk_size: C, query rows per chunk of the causal computation.
        key_padding_mask: bool (..., S), True = key may be attended, or
            ``attnkit.masks.key_padding(lengths)``.
        scale: factor on the scores q . k, default 1/sqrt(E); any finite value (the scale
            is split as sqrt(|scale|) on both sides, its sign on the query).

    Returns:
        (..., H, L, Ev) in the inputs' dtype (float16/bfloat16 computed in float32).

    Equivalent plain code (float64, without the stabilizing constants, which cancel)::

        x, y = query * sign(scale) * sqrt(|scale|), key * sqrt(|scale|)
        fq = exp(x @ W.T - |x|^2 / 2)                  # (..., L, m)
        fk = exp(y @ W.T - |y|^2 / 2) * alive          # (..., S, m), 0 at padded keys
        A = fq @ fk.mT                                 # (..., L, S), never built
        A = A * causal_mask if causal else A
        out = (A @ value) / (A @ 1)                    # 0 where the denominator is 0

    A row with no key to attend (all padded, or causal with bottom_right and L > S)
    gives 0, never NaN. Memory beyond the inputs and output: non-causal O(S m + L m +
    m Ev); causal the key features (..., S, m), one chunk's query features (..., C, m),
    its (..., C, C) block and the running state (..., m, Ev) -- never L x m x Ev.

    Raises:
        ShapeError, DTypeError, ParameterError, ArgumentTypeError (attnkit errors) before
        any work, naming the argument, its shape and the fix.
    """
    check_bool("causal", causal)
    if causal_alignment not in ALIGNMENTS:
        raise ParameterError(
            f"causal_alignment must be one of {ALIGNMENTS}, got {causal_alignment!r}."
        )
    chunk = check_positive_int("chunk_size", chunk_size, "use e.g. 128 (rows per causal chunk)")
    ops = prepare(query, key, value, key_padding_mask, scale)
    xp = ops.xp
    if features is None:
        num_features = check_positive_int(
            "num_features", num_features, "pass m, the number of random features"
        )
        if rng is None:
            raise ParameterError(
                "performer needs features= (W of shape (m, E)) or rng= to draw them: pass "
                "rng=numpy.random.default_rng(seed), torch.Generator().manual_seed(seed) or "
                "jax.random.key(seed) (keys are not stateful: split them between calls)."
            )
        w = performer_features(num_features, ops.E, rng=rng, like=ops.query, orthogonal=orthogonal)
    else:
        check_side_array("features", features, query, xp, ops.device, floating=True)
        _check_features(features, ops.lead, ops.E)
        w = features
    if w.dtype != ops.compute_dtype:
        w = xp.astype(w, ops.compute_dtype)
    root = math.sqrt(abs(ops.scale))
    x = ops.query * (math.copysign(root, ops.scale))  # (..., L, E)
    y = ops.key * root  # (..., S, E)
    fk = _key_features(ops, y, w)  # (..., S, m)
    if not causal:
        fq = _query_features(xp, x, w)  # (..., L, m)
        kv = xp.matrix_transpose(fk) @ ops.value  # (..., m, Ev)
        ksum = xp.sum(fk, axis=-2)[..., None]  # (..., m, 1)
        return ops.finish(safe_divide(xp, fq @ kv, fq @ ksum))  # (..., L, Ev)
    shift = ops.S - ops.L if causal_alignment == "bottom_right" else 0
    return ops.finish(_causal(ops, x, w, fk, shift, chunk))


def _check_features(w: Any, lead: tuple[int, ...], E: int) -> None:
    shape = tuple(w.shape)
    if len(shape) < 2 or shape[-1] != E or shape[-2] < 1:
        raise ShapeError(
            f"features must have shape (m, E) = (m, {E}) or (..., m, {E}) with m >= 1, got "
            f"{shape}; draw it with attnkit.approx.performer_features(m, {E}, rng=..., "
            "like=query)."
        )
    if broadcast_shapes(shape[:-2], lead) is None:
        raise ShapeError(
            f"features of shape {shape} has leading dims {shape[:-2]} that do not broadcast "
            f"with the inputs' {lead}; use (m, E) for features shared by all heads."
        )


def _logits(xp: Any, x: Any, w: Any) -> Any:
    """w_i . x - |x|^2 / 2 for every row x of ``x`` (..., N, E): (..., N, m)."""
    return x @ xp.matrix_transpose(w) - 0.5 * xp.sum(x * x, axis=-1, keepdims=True)


def _query_features(xp: Any, x: Any, w: Any) -> Any:
    """phi(x) times a per-row constant (which cancels): every row's largest feature is 1."""
    a = _logits(xp, x, w)  # (..., N, m)
    return xp.exp(a - xp.max(a, axis=-1, keepdims=True))  # (..., N, m)


def _key_features(ops: Operands, y: Any, w: Any) -> Any:
    """phi(y) times one constant per (batch, head) (which cancels); 0 at padded keys."""
    xp = ops.xp
    b = _logits(xp, y, w)  # (..., S, m)
    if ops.alive is not None:
        b = xp.where(ops.alive[..., None], b, -math.inf)  # padded keys get feature 0
    if ops.S == 0:
        return xp.exp(b)
    c = xp.max(xp.max(b, axis=-1, keepdims=True), axis=-2, keepdims=True)  # (..., 1, 1)
    c = xp.where(c == -math.inf, 0.0, c)  # no live key: any finite constant
    return xp.exp(b - c)  # (..., S, m), <= 1


def _causal(ops: Operands, x: Any, w: Any, fk: Any, shift: int, chunk: int) -> Any:
    """Chunked prefix sums: query row r sees keys j <= r + shift (module docstring)."""
    xp, S, v = ops.xp, ops.S, ops.value
    state = ksum = None  # sums over keys [0, done): (..., m, Ev) and (..., m, 1)
    done = 0
    outs = []
    for r0 in range(0, ops.L, chunk):
        r1 = min(ops.L, r0 + chunk)
        lo = min(max(r0 + shift + 1, 0), S)  # keys < lo: seen by every row of the chunk
        hi = min(max(r1 + shift, 0), S)  # keys [lo, hi): seen by some rows
        if lo > done:
            fk_new = fk[..., done:lo, :]  # (..., lo - done, m)
            add_kv = xp.matrix_transpose(fk_new) @ v[..., done:lo, :]  # (..., m, Ev)
            add_k = xp.sum(fk_new, axis=-2)[..., None]  # (..., m, 1)
            state = add_kv if state is None else state + add_kv
            ksum = add_k if ksum is None else ksum + add_k
            done = lo
        fq = _query_features(xp, x[..., r0:r1, :], w)  # (..., C, m)
        num = den = None
        if state is not None:
            num, den = fq @ state, fq @ ksum  # (..., C, Ev), (..., C, 1)
        if hi > lo:
            rows = xp.arange(r0, r1, device=ops.device)[:, None] + shift  # (C, 1)
            cols = xp.arange(lo, hi, device=ops.device)[None, :]  # (1, hi - lo)
            a = fq @ xp.matrix_transpose(fk[..., lo:hi, :])  # (..., C, hi - lo)
            a = xp.where(cols <= rows, a, 0.0)  # the causal part of the diagonal block
            block_num = a @ v[..., lo:hi, :]  # (..., C, Ev)
            block_den = xp.sum(a, axis=-1, keepdims=True)  # (..., C, 1)
            num = block_num if num is None else num + block_num
            den = block_den if den is None else den + block_den
        if num is None:  # no key visible to any row of this chunk
            lead = broadcast_shapes(tuple(fq.shape[:-2]), tuple(v.shape[:-2]))
            num = xp.zeros((*lead, r1 - r0, ops.Ev), dtype=ops.compute_dtype, device=ops.device)
            den = xp.zeros((*lead, r1 - r0, 1), dtype=ops.compute_dtype, device=ops.device)
        outs.append(safe_divide(xp, num, den))  # (..., C, Ev)
    if not outs:  # L = 0
        lead = broadcast_shapes(tuple(x.shape[:-2]), tuple(v.shape[:-2]))
        return xp.zeros((*lead, 0, ops.Ev), dtype=ops.compute_dtype, device=ops.device)
    outs = _broadcast_all(xp, outs)
    return outs[0] if len(outs) == 1 else xp.concat(outs, axis=-2)  # (..., L, Ev)


def _broadcast_all(xp: Any, parts: list[Any]) -> list[Any]:
    """Chunks computed from the state alone may have fewer leading dims than the others."""
    lead = broadcast_shapes(*(tuple(p.shape[:-2]) for p in parts))
    return [
        p if tuple(p.shape[:-2]) == lead else xp.broadcast_to(p, (*lead, *p.shape[-2:]))
        for p in parts
    ]
