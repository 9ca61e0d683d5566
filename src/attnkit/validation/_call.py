"""Input checks for :func:`attnkit.scaled_dot_product_attention`, gathered in one place.

Before any array work and reading no values, it returns a
:class:`attnkit._problem.Problem`, through :mod:`attnkit.checks`, :mod:`._arrays` and
:mod:`._structure`.
"""

from __future__ import annotations

from typing import Any

from .._problem import Problem
from ..checks import (
    check_alignment,
    check_dropout_p,
    check_flag,
    check_int,
    check_scale,
)
from ..compiling import static_ints
from ..errors import ParameterError
from ..masks import Geometry, Mask
from ..options import Options
from ..registry import backend_for
from ..score_mods import check_score_mod
from ._arrays import check_arrays, check_mask_shape, check_shapes, one_head_broadcast
from ._structure import check_structure, check_window, foreign_mask, structure_of

__all__ = ["IMPLS", "validate"]

IMPLS = ("auto", "generic", "reference")


def validate(query: Any, key: Any, value: Any, options: Options) -> Problem:
    """Validate one call and return its :class:`Problem`; raise before any work. Each
    argument is checked once, here."""
    o = options
    attn_mask, window, impl, block_size = o.attn_mask, o.window, o.impl, o.block_size
    is_causal, enable_gqa, causal_alignment = o.is_causal, o.enable_gqa, o.causal_alignment
    return_weights, return_lse, dropout_p, rng = o.return_weights, o.return_lse, o.dropout_p, o.rng
    # plain arguments
    if impl not in IMPLS:
        raise ParameterError(f"impl must be one of {IMPLS}, got {impl!r}.")
    check_alignment(causal_alignment)
    for name, flag in (
        ("is_causal", is_causal),
        ("enable_gqa", enable_gqa),
        ("return_weights", return_weights),
        ("return_lse", return_lse),
    ):
        check_flag(name, flag)
    dropout_p = check_dropout_p(dropout_p)
    if block_size is not None and (type(block_size) is not int or block_size < 1):
        raise ParameterError(f"block_size must be a positive int or None, got {block_size!r}.")
    window = check_window(window)
    q_offset, kv_offset = check_int("q_offset", o.q_offset), check_int("kv_offset", o.kv_offset)
    # arrays
    sizes = None
    if not (attn_mask is None or isinstance(attn_mask, Mask) or type(attn_mask) is type(query)):
        attn_mask, sizes = foreign_mask(query, attn_mask)
    xp, device = check_arrays(query, key, value, attn_mask)
    if enable_gqa:  # a key or value of one head meets the other's heads (as PyTorch's)
        key, value = one_head_broadcast(xp, key, value)
    groups, out_lead = check_shapes(query, key, value, enable_gqa)
    *out_lead, L, E, S, Ev = static_ints(  # Python ints (attnkit.compiling, item 4), once
        (*out_lead, query.shape[-2], query.shape[-1], key.shape[-2], value.shape[-1])
    )
    out_lead = tuple(out_lead)
    # structure
    structure = structure_of(is_causal, window, causal_alignment, attn_mask, out_lead, L, S)
    geometry = Geometry(L, S, q_offset, kv_offset)
    check_structure(xp, device, geometry, window, attn_mask, o.score_mod, sizes)
    if isinstance(attn_mask, Mask):
        attn_mask = None  # in the structure
    if attn_mask is not None:
        check_mask_shape(attn_mask, out_lead, L, S)
        if attn_mask.ndim < 2:  # (S,) or a scalar: give it the (L|1, S|1) axes the executors slice
            attn_mask = xp.reshape(attn_mask, (1,) * (2 - attn_mask.ndim) + tuple(attn_mask.shape))
    backend = backend_for(xp)
    if dropout_p > 0:
        if rng is None:
            raise ParameterError(
                f"dropout_p={dropout_p} needs an explicit rng (attnkit keeps no hidden random "
                "state): pass rng=numpy.random.default_rng(seed), "
                "torch.Generator().manual_seed(seed) or jax.random.key(seed)."
            )
        backend.check_rng(rng, like=query)
    num_heads = out_lead[-1] if out_lead and query.ndim >= 3 else 1
    dtype = query.dtype
    return Problem(
        xp=xp,
        device=device,
        backend=backend,
        dtype=dtype,
        compute_dtype=dtype if dtype in (xp.float32, xp.float64) else xp.float32,
        query=query,
        key=key,
        value=value,
        mask=attn_mask,
        mask_is_bool=attn_mask is not None and attn_mask.dtype == xp.bool,
        out_lead=out_lead,
        L=L,
        S=S,
        Ev=Ev,
        scale=check_scale(o.scale, E),
        structure=structure,
        geometry=geometry,
        dropout_p=dropout_p,
        rng=rng if dropout_p > 0 else None,
        gqa_groups=groups,
        score_mod=check_score_mod(o.score_mod, num_heads),
        num_heads=num_heads,
        impl=impl,
        need_weights=return_weights,
        need_lse=return_lse,
        block_size=block_size,
    )
