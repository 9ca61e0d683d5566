"""Merging attention computed over disjoint key sets, exactly, by log-sum-exp.

If keys are split into pieces and piece i gives ``out_i`` and ``lse_i`` (rows of
``softmax`` restricted to that piece, and the log of its normalizer), the attention over
all keys is::

    lse = log(sum_i exp(lse_i))
    out = sum_i exp(lse_i - lse) * out_i

A row empty in every piece gives out 0 and lse -inf (the textbook form gives NaN), and a
piece in which the row is empty contributes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import array_api_compat as aac

from .errors import ArgumentTypeError, DTypeError, NamespaceMismatchError, ShapeError
from .shapes import type_name

__all__ = ["finish_packed", "merge_packed", "merge_partials", "no_keys"]


def _validate(outs: Sequence[Any], lses: Sequence[Any]) -> Any:
    if isinstance(outs, str) or not isinstance(outs, Sequence) or not isinstance(lses, Sequence):
        raise ArgumentTypeError(
            "merge_partials takes two sequences (lists or tuples) of arrays, outs and lses, "
            f"got {type_name(outs)} and {type_name(lses)}; wrap single arrays in a list."
        )
    if len(outs) == 0 or len(outs) != len(lses):
        raise ShapeError(
            f"merge_partials needs one lse per output and at least one piece, got {len(outs)} "
            f"outputs and {len(lses)} lses."
        )
    xp = None
    for i, (out, lse) in enumerate(zip(outs, lses, strict=True)):
        for name, x in ((f"outs[{i}]", out), (f"lses[{i}]", lse)):
            if not aac.is_array_api_obj(x):
                raise ArgumentTypeError(
                    f"{name} must be an array, got {type_name(x)}; convert it first, e.g. "
                    "with the array library's asarray."
                )
            if xp is None:
                xp = aac.array_namespace(x)
            elif aac.array_namespace(x) is not xp:
                raise NamespaceMismatchError(
                    f"{name} is a {type_name(x)} but outs[0] a {type_name(outs[0])}; pass arrays "
                    "of one library."
                )
            if not xp.isdtype(x.dtype, "real floating"):
                raise DTypeError(f"{name} has dtype {x.dtype}; expected a real floating dtype.")
        if out.ndim < 1:
            raise ShapeError(
                f"outs[{i}] has shape {tuple(out.shape)}; each output needs at least a feature "
                "axis (..., L, Ev)."
            )
        if tuple(out.shape) != tuple(outs[0].shape):
            raise ShapeError(
                f"outs[{i}] has shape {tuple(out.shape)} but outs[0] has "
                f"{tuple(outs[0].shape)}; every piece must cover the same query rows (..., L, Ev)."
            )
        if tuple(lse.shape) != tuple(out.shape)[:-1]:
            raise ShapeError(
                f"lses[{i}] has shape {tuple(lse.shape)} but its output has shape "
                f"{tuple(out.shape)}; each lse must have the output's shape without the last "
                f"axis, {tuple(out.shape)[:-1]}."
            )
    return xp


def merge_partials(outs: Sequence[Any], lses: Sequence[Any]) -> tuple[Any, Any]:
    """Merge pieces of attention over disjoint key sets: returns (out, lse).

    Args:
        outs: outputs of each piece, all of shape (..., L, Ev).
        lses: row log-sum-exp of each piece, all of shape (..., L) (``-inf`` where the row
            had no key in that piece), as returned by
            ``scaled_dot_product_attention(..., return_lse=True)``.

    Returns:
        ``(out, lse)``: out (..., L, Ev) in the outputs' dtype, lse (..., L) in the
        lses' dtype. Equal to attention over the union of the key sets.
    """
    xp = _validate(outs, lses)
    cd = xp.result_type(outs[0].dtype, lses[0].dtype)  # float32 at least for 16-bit outputs
    stacked = xp.stack(
        [x if x.dtype == cd else xp.astype(x, cd) for x in lses], axis=0
    )  # (P, ..., L)
    top = xp.max(stacked, axis=0)  # (..., L)
    top = xp.where(top == -math.inf, 0.0, top)
    scale = xp.exp(stacked - top)  # (P, ..., L), 0 for empty pieces
    total = xp.sum(scale, axis=0)  # (..., L), 0 where every piece is empty
    nonempty = total != 0  # NaN (a piece attended a NaN score) stays NaN
    safe_total = xp.where(nonempty, total, 1.0)
    lse = xp.where(nonempty, top + xp.log(safe_total), -math.inf)  # (..., L)
    lse = lse if lse.dtype == lses[0].dtype else xp.astype(lse, lses[0].dtype)
    out = None
    for i, piece in enumerate(outs):
        weight = (scale[i, ...] / safe_total)[..., None]  # (..., L, 1)
        # where, not a product alone: a piece's output on a row it found empty may be NaN
        # (other frameworks' kernels), and 0 * NaN is NaN.
        term = xp.where(
            weight == 0, 0.0, weight * (piece if piece.dtype == cd else xp.astype(piece, cd))
        )
        out = term if out is None else out + term
    out_dtype = outs[0].dtype
    return (out if out.dtype == out_dtype else xp.astype(out, out_dtype)), lse


def merge_packed(held: Any, new: Any) -> Any:
    """Two pieces of attention over disjoint keys of the same rows, each packed as
    (..., rows, Ev + 2) = [acc | m | l], merged into one packed the same way (the online
    softmax of FlashAttention). For a piece over keys J: ``m`` the largest score of the
    row over J (-inf where the row has none), ``l = sum_j exp(s_j - m)`` and
    ``acc = sum_j d_j exp(s_j - m) v_j`` (``d_j`` dropout's keep / (1 - p), else 1)::

        m   = max(m_a, m_b)
        acc = acc_a exp(m_a - m) + acc_b exp(m_b - m)
        l   = l_a exp(m_a - m) + l_b exp(m_b - m)

    A row empty in both stays empty (m -inf, l 0, acc 0: no NaN); a NaN score in either
    makes the row NaN, as the formula does. :func:`finish_packed` gives out and lse."""
    xp = aac.array_namespace(held)
    m_a, m_b = held[..., -2:-1], new[..., -2:-1]  # (..., rows, 1)
    m = xp.maximum(m_a, m_b)
    shift = xp.where(m == -math.inf, 0.0, m)  # both empty: any finite shift
    c_a, c_b = xp.exp(m_a - shift), xp.exp(m_b - shift)  # 0 for an empty piece
    acc = held[..., :-2] * c_a + new[..., :-2] * c_b  # (..., rows, Ev)
    total = held[..., -1:] * c_a + new[..., -1:] * c_b  # (..., rows, 1)
    return xp.concat([acc, m, total], axis=-1)


def finish_packed(packed: Any) -> tuple[Any, Any]:
    """``(out (..., rows, Ev), lse (..., rows))`` of a packed piece [acc | m | l]:
    ``out = acc / l`` and ``lse = m + log(l)``; rows with no key give out 0 and lse
    -inf (the divisions and the log see 1 there, so no gradient is NaN)."""
    xp = aac.array_namespace(packed)
    m, total = packed[..., -2], packed[..., -1]  # (..., rows)
    empty = total == 0
    safe = xp.where(empty, 1.0, total)
    out = packed[..., :-2] / safe[..., None]
    return out, xp.where(empty, -math.inf, m + xp.log(safe))


def no_keys(xp: Any, shape: tuple[int, ...], dtype: Any, device: Any) -> Any:
    """Attention over no key, packed (..., n, Ev + 2) = [acc 0 | m -inf | l 0]: what
    merged pieces start from; rows no piece reaches stay so."""
    # one row broadcast (a compiler keeps a broadcast as one; a concatenation of two
    # full-size constants it may fold into a literal of the whole array)
    row = xp.concat([
        xp.zeros((shape[-1] - 2,), dtype=dtype, device=device),
        xp.full((1,), -math.inf, dtype=dtype, device=device),
        xp.zeros((1,), dtype=dtype, device=device),
    ])  # fmt: skip
    return xp.broadcast_to(row, tuple(shape))
