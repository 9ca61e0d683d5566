"""Performer (Choromanski et al. 2021): softmax attention through positive random features.

With x, y the query and key scaled so that x . y = scale * q . k, and m random features
W (m, E) (:func:`performer_features`)::

    exp(x . y) = E_w[phi(x) . phi(y)],   phi(x)_i = exp(w_i . x - |x|^2 / 2) / sqrt(m)
    out = phi(Q) (phi(K)^T V) / (phi(Q) (phi(K)^T 1))        # (..., L, Ev), O((L + S) m E)

Queries' and keys' features are divided by their (running) maxima, which cancel, so no
feature exceeds 1. Rows are read in chunks of C; causal, keys before a query chunk are in
the running state and keys inside it go through a masked (C, C) block::

    out_chunk = (phi(Q_c) state + tril(phi(Q_c) phi(K_c)^T) V_c) / (same with 1 for V)
"""

from __future__ import annotations

import math
from typing import Any

from ..checks import ALIGNMENTS, check_flag, check_positive_int
from ..errors import ParameterError, ShapeError
from ..shapes import broadcast_shapes, prod
from ._common import (
    Operands,
    check_side_array,
    prepare,
    safe_divide,
)
from .random_features import performer_features

__all__ = ["CAUSAL_CHUNK", "CHUNK_BUDGET", "performer"]


#: Elements of one (..., rows, m) feature chunk when ``chunk_size`` is None (non-causal):
#: 2**20 float32 values are 4 MiB, small enough to stay in cache, big enough for speed.
CHUNK_BUDGET = 2**20
#: Query rows per chunk of the causal computation when ``chunk_size`` is None.
CAUSAL_CHUNK = 128


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
    chunk_size: int | None = None,
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
        chunk_size: C, rows per chunk. Default: 128 query rows for causal (the (C, C)
            block costs C x (m + Ev) per row), else as many rows as keep one feature
            chunk (..., C, m) within :data:`CHUNK_BUDGET` elements. Results do not
            depend on it beyond rounding.
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
    gives 0, never NaN. Memory beyond the inputs and output, per (batch, head): the
    state (m, Ev) and one chunk: its features (C, m) and, causal, its (C, C) block --
    never L x m, let alone L x m x Ev.

    Raises:
        ShapeError, DTypeError, ParameterError, ArgumentTypeError (attnkit errors) before
        any work, naming the argument, its shape and the fix.
    """
    check_flag("causal", causal)
    if causal_alignment not in ALIGNMENTS:
        raise ParameterError(
            f"causal_alignment must be one of {ALIGNMENTS}, got {causal_alignment!r}."
        )
    if chunk_size is not None:
        check_positive_int("chunk_size", chunk_size, "use e.g. 128, or None for the default")
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
    heads = prod(broadcast_shapes(ops.lead, tuple(w.shape[:-2])) or ops.lead)
    rows = max(16, CHUNK_BUDGET // max(1, heads * w.shape[-2]))
    run = _Run(ops, w, rows=rows)
    if not causal:
        run.fold(0, ops.S, chunk_size or rows)
        return ops.finish(run.read(chunk_size or rows))
    shift = ops.S - ops.L if causal_alignment == "bottom_right" else 0
    return ops.finish(run.causal(shift, chunk_size or CAUSAL_CHUNK))


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


class _Run:
    """One call's running sums over the keys folded so far, all scaled by exp(-c)::

    kv = sum_j phi(k_j) v_j^T (..., m, Ev),  ks = sum_j phi(k_j) (..., m, 1)

    c (..., 1, 1) is the running maximum of the live keys' logits (-inf before any)."""

    def __init__(self, ops: Operands, w: Any, *, rows: int) -> None:
        self.ops, self.xp, self.w, self.rows = ops, ops.xp, w, rows
        root = math.sqrt(abs(ops.scale))
        # x = query * x_factor, y = key * y_factor, scaled chunk by chunk (no full copies)
        self.x_factor, self.y_factor = math.copysign(root, ops.scale), root
        self.kv = self.ks = self.c = None

    def _key_logits(self, lo: int, hi: int) -> Any:
        y = self.ops.key[..., lo:hi, :] * self.y_factor  # (..., n, E)
        b = _logits(self.xp, y, self.w)  # (..., n, m)
        if self.ops.alive is not None:  # padded keys get feature exp(-inf) = 0
            b = self.xp.where(self.ops.alive[..., lo:hi, None], b, -math.inf)
        return b

    def _key_features(self, b: Any) -> Any:
        """exp(b - c) after raising c to cover ``b``; the sums so far are rescaled."""
        xp = self.xp
        top = xp.max(xp.max(b, axis=-1, keepdims=True), axis=-2, keepdims=True)  # (..., 1, 1)
        old = self.c
        self.c = top if old is None else xp.maximum(old, top)
        if self.kv is not None:  # exp(c_old - c_new) <= 1 (0 while nothing was live)
            factor = xp.exp(_finite(xp, old) - _finite(xp, self.c))
            self.kv, self.ks = self.kv * factor, self.ks * factor
        return xp.exp(b - _finite(xp, self.c))  # (..., n, m), <= 1

    def _add(self, fk: Any, lo: int, hi: int) -> None:
        add_kv = self.xp.matrix_transpose(fk) @ self.ops.value[..., lo:hi, :]  # (..., m, Ev)
        add_ks = self.xp.sum(fk, axis=-2)[..., None]  # (..., m, 1)
        self.kv = add_kv if self.kv is None else self.kv + add_kv
        self.ks = add_ks if self.ks is None else self.ks + add_ks

    def fold(self, lo: int, hi: int, chunk: int) -> None:
        """Add keys [lo, hi) to the sums, ``chunk`` keys at a time."""
        for start in range(lo, hi, chunk):
            stop = min(hi, start + chunk)
            self._add(self._key_features(self._key_logits(start, stop)), start, stop)

    def _query_features(self, r0: int, r1: int) -> Any:
        """phi(x) times a per-row constant (which cancels): every row's largest is 1."""
        x = self.ops.query[..., r0:r1, :] * self.x_factor  # (..., C, E)
        a = _logits(self.xp, x, self.w)  # (..., C, m)
        return self.xp.exp(a - self.xp.max(a, axis=-1, keepdims=True))

    def _zeros(self, n: int) -> tuple[Any, Any]:
        ops = self.ops
        lead = broadcast_shapes(tuple(ops.query.shape[:-2]), tuple(ops.value.shape[:-2]))
        shape = (*lead, n, ops.Ev)
        zeros = self.xp.zeros(shape, dtype=ops.compute_dtype, device=ops.device)
        return zeros, zeros[..., :1]

    def _state_part(self, fq: Any) -> tuple[Any, Any]:
        if self.kv is None:
            return self._zeros(fq.shape[-2])
        return fq @ self.kv, fq @ self.ks  # (..., C, Ev), (..., C, 1)

    def read(self, chunk: int) -> Any:
        """Non-causal: every query row against the sums, ``chunk`` rows at a time."""
        outs = []
        for r0 in range(0, self.ops.L, chunk):
            num, den = self._state_part(self._query_features(r0, min(self.ops.L, r0 + chunk)))
            outs.append(safe_divide(self.xp, num, den))  # (..., C, Ev)
        return self._concat(outs)

    def causal(self, shift: int, chunk: int) -> Any:
        """Query row r sees keys j <= r + shift (module docstring)."""
        xp, S = self.xp, self.ops.S
        done, outs = 0, []
        for r0 in range(0, self.ops.L, chunk):
            r1 = min(self.ops.L, r0 + chunk)
            lo = min(max(r0 + shift, 0), S)  # keys < lo: seen by every row of the chunk
            hi = min(max(r1 + shift, 0), S)  # keys [lo, hi): seen by some rows
            if lo > done:
                self.fold(done, lo, self.rows)
            fk = self._key_features(self._key_logits(lo, hi)) if hi > lo else None
            fq = self._query_features(r0, r1)  # (..., C, m)
            num, den = self._state_part(fq)
            if fk is not None:
                rows = xp.arange(r0, r1, device=self.ops.device)[:, None] + shift  # (C, 1)
                cols = xp.arange(lo, hi, device=self.ops.device)[None, :]  # (1, hi - lo)
                a = fq @ xp.matrix_transpose(fk)  # (..., C, hi - lo)
                a = xp.where(cols <= rows, a, 0.0)  # the causal part of the block
                num = num + a @ self.ops.value[..., lo:hi, :]  # (..., C, Ev)
                den = den + xp.sum(a, axis=-1, keepdims=True)  # (..., C, 1)
                self._add(fk, lo, hi)
            done = max(done, hi)
            outs.append(safe_divide(xp, num, den))  # (..., C, Ev)
        return self._concat(outs)

    def _concat(self, outs: list[Any]) -> Any:
        if not outs:  # L = 0
            return self._zeros(0)[0]
        lead = broadcast_shapes(*(tuple(p.shape[:-2]) for p in outs))
        outs = [
            p if tuple(p.shape[:-2]) == lead else self.xp.broadcast_to(p, (*lead, *p.shape[-2:]))
            for p in outs
        ]  # a chunk read from an empty state may have fewer leading dims
        return outs[0] if len(outs) == 1 else self.xp.concat(outs, axis=-2)  # (..., L, Ev)


def _finite(xp: Any, c: Any) -> Any:
    """The stabilizing constant: c, or 0 where no live key has been read (c = -inf)."""
    return xp.where(c == -math.inf, 0.0, c)
