"""``scaled_dot_product_attention``: the public entry point and its contract."""

from __future__ import annotations

from typing import Any, NamedTuple

from ._validate import Problem, check_flag, prepare, signature
from .dense import blocked_attention
from .errors import ParameterError
from .reference import reference_attention

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
            executor), or ``"reference"`` (the plain full-matrix formula).
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

    Raises:
        attnkit.errors.ShapeError, DTypeError, NamespaceMismatchError,
        DeviceMismatchError, ParameterError (``ValueError``/``TypeError`` subclasses),
        before any work, naming the argument, its shape and the fix.
    """
    if type(return_weights) is not bool or type(return_lse) is not bool:
        check_flag("return_weights", return_weights)
        check_flag("return_lse", return_lse)
    if block_size is not None and (type(block_size) is not int or block_size < 1):
        raise ParameterError(f"block_size must be a positive int or None, got {block_size!r}.")
    fast = impl == "auto" and not (return_weights or return_lse)
    sig = None
    if fast and attn_mask is None and window is None and score_mod is None and block_size is None:
        if type(dropout_p) in (float, int) and dropout_p == 0:
            sig = signature(query, key, value, is_causal, scale, enable_gqa,
                            causal_alignment, q_offset, kv_offset, impl)  # fmt: skip
            plan = _PLANS.get(sig) if sig is not None else None
            if plan is not None:  # a signature seen before: validated, the kernel chosen
                out = plan(query, key, value)
                if out is not None:  # None: this call's values need the generic path
                    return out
    problem = prepare(
        query,
        key,
        value,
        attn_mask,
        dropout_p,
        is_causal,
        scale,
        enable_gqa,
        causal_alignment,
        window,
        q_offset,
        kv_offset,
        rng,
        impl,
        score_mod,
        sig,  # computed above for a plain call, else None
    )
    if fast:
        fused = _fused(problem)
        if fused is not None:
            if sig is not None:
                _remember_plan(sig, problem)
            return fused
        if problem.dropout_p == 0 and problem.score_mod is None:
            problem.block_kernel = _block_kernel(problem)
    if impl == "reference":
        out, weights, lse = reference_attention(problem)
    else:
        # Without weights or dropout, autodiff may recompute each block in the backward
        # pass instead of storing its (Bq, Sk) intermediates: backward memory then grows
        # with the attended pairs too (a backend's optional ``recompute_block``).
        plain = not return_weights and problem.dropout_p == 0
        recompute = _kernel(problem.xp, "recompute_block") if plain else None
        out, weights, lse = blocked_attention(problem, return_weights, block_size, recompute)
    out = _finish(problem, out, problem.Ev)
    if not (return_weights or return_lse):
        return out
    if return_weights:
        weights = _finish(problem, weights, problem.S)
        if not return_lse:
            return AttentionWithWeights(out, weights)
    lse = _finish_lse(problem, lse)
    if not return_weights:
        return AttentionWithLSE(out, lse)
    return AttentionWithWeightsAndLSE(out, weights, lse)


_KERNELS: dict[tuple[int, str], Any] = {}


def _kernel(xp: Any, name: str) -> Any:
    """The optional function ``name`` of the backend adapter for ``xp`` (looked up once)."""
    key = (id(xp), name)
    if key not in _KERNELS:
        from . import backends

        backend = backends.name_or_none(xp)
        _KERNELS[key] = None if backend is None else getattr(backends.load(backend), name, None)
    return _KERNELS[key]


def _fused(p: Problem) -> Any:
    """A backend's fused kernel where its semantics match exactly, else None."""
    kernel = _kernel(p.xp, "fused_attention")
    return None if kernel is None else kernel(p)


#: For plain calls (no mask, window, dropout, score_mod, weights or lse) by signature
#: (:func:`attnkit._validate.signature`: array type, shapes, dtypes, devices and scalar
#: arguments): the backend's whole-call kernel with its arguments bound, from
#: ``fused_plan``. A decoding loop then pays for validation and dispatch once. At most
#: _PLANS_MAX entries.
_PLANS: dict[tuple[Any, ...], Any] = {}
_PLANS_MAX = 64


def _remember_plan(sig: tuple[Any, ...], p: Problem) -> None:
    """Keep the backend's ``fused_plan(p)`` (a function of query, key, value giving what
    ``fused_attention(p)`` gave) for later calls of signature ``sig``."""
    kernel = _kernel(p.xp, "fused_plan")
    plan = None if kernel is None else kernel(p)
    if plan is not None:
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.clear()
        _PLANS[sig] = plan


def _block_kernel(p: Problem) -> Any:
    """A backend's fused kernel for one block of the generic executor, or None."""
    return _kernel(p.xp, "block_attention")


def _finish(p: Problem, x: Any, last: int) -> Any:
    """Back to the caller's dtype and shape (..., Hq, L, last), GQA axes merged."""
    xp = p.xp
    if x.dtype != p.dtype:
        x = xp.astype(x, p.dtype)
    target = (*p.out_lead, p.L, last)
    if tuple(x.shape) != target:
        x = xp.reshape(x, target) if p.gqa_groups > 1 else xp.broadcast_to(x, target)
    return x


def _finish_lse(p: Problem, lse: Any) -> Any:
    target = (*p.out_lead, p.L)
    if tuple(lse.shape) != target:
        lse = p.xp.reshape(lse, target) if p.gqa_groups > 1 else p.xp.broadcast_to(lse, target)
    return lse
