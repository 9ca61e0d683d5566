"""``scaled_dot_product_attention``: the public entry point and its contract."""

from __future__ import annotations

from typing import Any, NamedTuple

from . import _dispatch
from .call_checks import validate
from .compiled import compiled_call
from .options import Options
from .problem import Problem, caller_layout

__all__ = [
    "AttentionWithLSE",
    "AttentionWithWeights",
    "AttentionWithWeightsAndLSE",
    "scaled_dot_product_attention",
]


class AttentionWithWeights(NamedTuple):
    """``(output, weights)``: returned when ``return_weights=True``."""

    output: Any
    weights: Any


class AttentionWithLSE(NamedTuple):
    """``(output, lse)``: returned when ``return_lse=True``."""

    output: Any
    lse: Any


class AttentionWithWeightsAndLSE(NamedTuple):
    """``(output, weights, lse)``: returned when both are asked for."""

    output: Any
    weights: Any
    lse: Any


def scaled_dot_product_attention(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    causal_alignment: str = "top_left",
    window: Any = None,
    return_weights: bool = False,
    return_lse: bool = False,
    q_offset: int = 0,
    kv_offset: int = 0,
    rng: Any = None,
    impl: str = "auto",
    block_size: int | None = None,
    score_mod: Any = None,
) -> Any:
    r"""Scaled dot-product attention on NumPy, PyTorch, JAX or any array-API arrays.

    Shape legend: ``...`` leading dims (broadcast), Hq/Hkv query/key heads, L query
    length, S key length, E query/key features, Ev value features.

    Args:
        query: (..., Hq, L, E). Rank >= 2; a 2-D (L, E) or the 3-D (batch, L, E) works.
        key: (..., Hkv, S, E).
        value: (..., Hkv, S, Ev).
        attn_mask: None, a bool array (True = may attend), a real floating array added
            to the scores (0 / -inf), any shape that broadcasts to (..., Hq, L, S), or a
            structured :mod:`attnkit.masks` mask (causal, windows, padding, documents,
            global tokens, BigBird, block-sparse layouts, combined with & and |), whose
            key blocks that no query may attend are never read. Positions where a float
            mask is -inf count as masked.
        dropout_p: probability of zeroing a weight after the softmax (survivors scaled
            by 1 / (1 - p)); needs ``rng``. Pass 0.0 at evaluation time.
        is_causal: query i may attend key j only where key position <= query position.
        scale: factor applied to the scores; default 1/sqrt(E). May be negative or tiny.
        enable_gqa: grouped-query attention when Hq != Hkv (Hq % Hkv == 0): query head h
            uses key/value head h // (Hq / Hkv), as PyTorch. Computed by reshaping the
            query to (..., Hkv, Hq/Hkv, L, E); key/value heads are never copied.
        causal_alignment: where the causal diagonal sits when L != S. For L = 2, S = 4::

                top_left (PyTorch)      bottom_right (FlashAttention, decoding)
                    k0 k1 k2 k3             k0 k1 k2 k3
                q0  x  .  .  .          q0  x  x  x  .
                q1  x  x  .  .          q1  x  x  x  x

            ``bottom_right`` is ``top_left`` with ``q_offset`` increased by S - L.
        window: None, an int W meaning (W, W), or (left, right) with None for an
            unbounded side: query i sees keys i-left .. i+right (FlashAttention's
            ``window_size``), or any :mod:`attnkit.masks` mask. Combines with
            ``is_causal`` and ``attn_mask`` by AND.
        return_weights: also return the attention weights (..., Hq, L, S): the ones
            applied, dropout included. Materializes L x S.
        return_lse: also return the row log-sum-exp of the scores (..., Hq, L), -inf on
            rows with nothing to attend; float32 for 16-bit inputs. Feed it to
            :func:`attnkit.merge_partials`.
        q_offset, kv_offset: absolute positions of the first query and key, so that
            causal and window structure stay right when attention is computed piece by
            piece (key blocks, kv-cache decoding, ring attention).
        rng: backend-native generator used only when ``dropout_p > 0``: a NumPy
            ``Generator`` (NumPy and array-api-strict), a ``torch.Generator`` on the
            inputs' device, or a JAX PRNG key. The same rng state gives the same result
            for the same call.
        impl: ``"auto"`` (the best exact path), ``"generic"`` (the array-API blocked
            executor, :mod:`attnkit.blocked`), or ``"reference"`` (the plain full-matrix
            formula, :mod:`attnkit.reference`). Under ``"auto"``: PyTorch runs
            ``F.scaled_dot_product_attention`` for the whole call where its semantics
            equal attnkit's (no dropout, weights, lse, score_mod, or window or
            structured mask that leaves out a pair; causal only top-left at offset 0,
            or a decoding step's bottom-right row), else the blocked executor with
            SDPA on each block and on a window's interior; NumPy runs the blocked
            executor with its reused-buffer block kernel; JAX and array-api-strict run
            the blocked executor's array-API arithmetic (under ``jax.jit``, XLA fuses
            it). :func:`attnkit.explain` says which path a call takes and why.
        block_size: query rows per block for the blocked executor; default chosen so a
            block's scores stay within 16 MiB. Results do not depend on it, except the
            dropout pattern, which is drawn block by block.

        score_mod: None, :func:`attnkit.score_mods.alibi`, :func:`attnkit.score_mods.softcap`
            or any elementwise callable ``f(scores, q_idx, kv_idx, head) -> scores`` over
            arrays (``scores`` (..., H, Bq, Sk) scaled, ``q_idx`` (Bq, 1) and ``kv_idx``
            (1, Sk) absolute positions, ``head`` (H, 1, 1)), applied before masking.

    Returns:
        ``out`` (..., Hq, L, Ev) in the inputs' dtype; with ``return_weights`` and/or
        ``return_lse`` a named tuple ``(output, weights)``, ``(output, lse)`` or
        ``(output, weights, lse)``.

    Semantics:
        Equivalent to this plain code (``where`` rather than adding -inf, so that NaN
        or inf scores at masked positions never leak)::

            s = (query @ key.mT) * scale + (attn_mask if float else 0)
            allowed = causal & window & (attn_mask if bool else attn_mask != -inf)
            weights = softmax(where(allowed, s, -inf), axis=-1)   # 0 on empty rows
            out = dropout(weights) @ value

        A query row with nothing to attend (fully masked, or causal with L > S) gives
        output 0, weights 0, lse -inf and gradient 0, never NaN. Keys that no query may
        attend under ``attn_mask`` are zeroed first, so NaN or inf stored in padding
        cannot leak through 0 * NaN. float16/bfloat16 inputs accumulate scores and
        softmax in float32 and return their own dtype. Zero-length L or S works (S = 0
        gives zeros). Every array made inside uses the inputs' namespace and device.
        A row that attends a NaN score gives NaN output and lse. Masks of rank 0 or 1
        broadcast; PyTorch's ``CausalBias`` is accepted as ``attn_mask``. Boolean
        arguments must be ``True`` or ``False`` (``0`` or ``None`` are refused).

    Raises:
        attnkit.errors.ShapeError, DTypeError, NamespaceMismatchError,
        DeviceMismatchError, ParameterError (``ValueError``/``TypeError`` subclasses),
        before any work, naming the argument, its shape and the fix.
    """
    options = Options.of(locals())  # the non-array arguments, by name
    out, sig = _dispatch.planned(query, key, value, options)
    if out is not None:  # a plain call of a signature seen before, straight to its kernel
        return out
    known = _dispatch.known_problem(sig, query, key, value, options.attn_mask)
    if known is None:  # (a plain signature seen before ran as it is: no program)
        backend = _dispatch.compiler_of(query)
        if backend is not None:  # JAX: this signature's program; torch.compile: one node
            done, out = compiled_call(query, key, value, options, _attention, backend)
            if done:
                return out
    return _attention(query, key, value, options, sig, known)


def _attention(
    query: Any, key: Any, value: Any, options: Options, sig: Any = None, known: Any = None
) -> Any:
    """validate -> plan -> run: the call's result (its ``sig``, where it is a plain call,
    remembered by the dispatch's caches; ``known``: its Problem, validated before)."""
    problem = known or validate(query, key, value, options)
    out, weights, lse = _dispatch.attend(problem, sig)
    return _finish(problem, out, weights, lse)


def _finish(p: Problem, out: Any, weights: Any, lse: Any) -> Any:
    """The caller's dtype and shapes (..., Hq, L, Ev): the GQA axes merged, broadcast
    leading dims expanded (an output in them already, as most are, kept as it is); the
    result type the flags ask for."""
    if out.dtype != p.dtype or tuple(out.shape) != (*p.out_lead, p.L, p.Ev):
        out = caller_layout(p, out, (p.L, p.Ev), p.dtype)
    if not (p.need_weights or p.need_lse):
        return out
    if p.need_weights:
        weights = caller_layout(p, weights, (p.L, p.S), p.dtype)
        if not p.need_lse:
            return AttentionWithWeights(out, weights)
    lse = caller_layout(p, lse, (p.L,), lse.dtype)  # float32 for 16-bit inputs
    if not p.need_weights:
        return AttentionWithLSE(out, lse)
    return AttentionWithWeightsAndLSE(out, weights, lse)
