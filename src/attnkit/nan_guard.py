"""Masking the operands: which pairs a tile allows, and zeroing what a mask leaves unused.

Masked scores are replaced with ``where``, but a NaN or inf stored in a row a mask leaves
unused could still reach the results through ``0 * NaN`` in the products;
:func:`neutralize` zeroes such rows first. Both executors use these.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from .masks import Tile
from .problem import Problem, gqa_mask

__all__ = ["all_finite", "allowed_pairs", "neutralize", "weighted_values"]


def allowed_pairs(p: Problem, t: Tile, structure_tile: Any, user_mask: Any) -> Any:
    """Bool (..., Bq, Sk) of the pairs allowed in tile ``t`` (None = all), in the GQA
    layout: the structure's tile (already computed, e.g. cached for a window) AND the
    rows and columns of ``user_mask`` (the bool form of ``attn_mask``) that the tile
    covers."""
    allowed = structure_tile
    if allowed is not None and p.gqa_groups > 1:
        allowed = gqa_mask(p.xp, allowed, p.gqa_groups)
    if user_mask is not None:
        user = t.columns(t.rows(user_mask))  # (..., Bq|1, Sk|1)
        allowed = user if allowed is None else allowed & user
    return allowed


def neutralize(xp: Any, q: Any, k: Any, v: Any, allowed: Any) -> tuple[Any, Any, Any]:
    """q, k, v with zeros where ``allowed`` (..., Bq|1, Sk|1) leaves them unused: key and
    value rows of columns that no row may attend, and query rows that may attend
    nothing. NaN or inf stored there (padding, keys out of a window's reach, an empty
    row's query) then cannot leak into outputs or gradients through 0 * NaN in the
    matrix products. A row or column counts as used when any slice sharing it (its
    broadcast leading dims) uses it, so nothing is copied per head.

    q (..., Bq, E), k (..., Sk, E), v (..., Sk, Ev) -> the same shapes.
    """
    k_cols = xp.matrix_transpose(_shared_any(xp, allowed, -2, k.shape))  # (..., Sk|1, 1)
    v_cols = k_cols
    if tuple(v.shape[:-2]) != tuple(k.shape[:-2]):  # value has leading dims of its own
        v_cols = xp.matrix_transpose(_shared_any(xp, allowed, -2, v.shape))
    rows = _shared_any(xp, allowed, -1, q.shape)  # (..., Bq|1, 1)
    return xp.where(rows, q, 0.0), xp.where(k_cols, k, 0.0), xp.where(v_cols, v, 0.0)


def weighted_values(p: Problem, w: Any, v: Any) -> Any:
    """``w @ v`` (..., Bq, Ev) in which a weight of exactly 0 takes nothing from its value
    row, even a NaN or inf one (IEEE's 0 * inf is NaN): a masked pair of a column that
    other rows of the block attend (so :func:`neutralize` keeps it) cannot leak.

    Where a nonzero weight meets a non-finite value the plain product is kept (inf or
    NaN, as the formula gives); elsewhere the product over the finite values: three
    products instead of one, only for a block whose values are not all finite (checked
    concretely, or under ``jax.jit`` chosen at run time by the backend's ``select``).
    w (..., Bq, Sk), v (..., Sk, Ev).
    """
    xp = p.xp
    finite = all_finite(p, v)
    if finite:
        return w @ v
    select = p.backend.select
    if finite is None and select is not None:
        ok = xp.all(xp.isfinite(v))
        return select(ok, _plain_product, functools.partial(_guarded_product, xp), w, v)
    return _guarded_product(xp, w, v)


def _plain_product(w: Any, v: Any) -> Any:
    return w @ v


def _guarded_product(xp: Any, w: Any, v: Any) -> Any:
    finite = xp.isfinite(v)
    clean = w @ xp.where(finite, v, xp.zeros_like(v))  # (..., Bq, Ev)
    hits = xp.astype(w != 0, w.dtype) @ xp.astype(~finite, w.dtype)  # nonzero weight x bad value
    return xp.where(hits > 0, w @ v, clean)


def _shared_any(xp: Any, allowed: Any, axis: int, shape: tuple[int, ...]) -> Any:
    """any(allowed) over ``axis`` (-1 or -2, kept) and over every leading axis on which an
    operand of ``shape`` is broadcast (size 1 or absent), so the result's leading dims
    broadcast to the operand's without enlarging it."""
    alive = xp.any(allowed, axis=axis, keepdims=True)
    n_lead = alive.ndim - 2
    extra = n_lead - (len(shape) - 2)  # leading axes the operand lacks
    reduce = []
    for i in range(n_lead):
        if alive.shape[i] == 1:
            continue
        if i < extra or shape[i - extra] == 1:
            reduce.append(i)
    if reduce:
        alive = xp.any(alive, axis=tuple(reduce), keepdims=True)
    if extra > 0:
        alive = xp.reshape(alive, tuple(alive.shape[extra:]))
    return alive


def all_finite(p: Problem, *arrays: Any) -> bool | None:
    """True when every element of ``arrays`` is finite, False when one is NaN or inf,
    None when the values cannot be read (traced under ``jax.jit``). One sum per array
    (O(size), no temporary): a NaN or inf makes the sum non-finite; a finite sum that
    overflows reads as not finite, which only costs the guarded path."""
    try:
        return all(math.isfinite(p.backend.concrete_float(p.xp.sum(x))) for x in arrays)
    except (TypeError, RuntimeError, ValueError):  # traced: no concrete value (jax.jit)
        return None
