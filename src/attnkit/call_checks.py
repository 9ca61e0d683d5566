"""The checks of :func:`attnkit.scaled_dot_product_attention`, without the computation.

For front-ends that split one call into pieces (ring and Ulysses attention over devices
or processes, a caller's own blocking): :func:`check_call` raises exactly the errors the
call would raise, before any work, and returns the :class:`CallInfo` of the call (shapes,
dtypes, the structure of the mask, the block size);
:func:`attnkit.plan.default_block_size` is the executor's own choice of query rows per
block, with its memory budget shared among processes when each holds one shard.

Every check of a call goes through one entry: :func:`validate`, which the public
functions (``scaled_dot_product_attention``, ``explain``, ``attention_vjp``,
``partial_attention_vjp``, :func:`check_call`) call once with ``(query, key, value,
options)`` and which checks each argument once, in one pass: plain arguments
(:mod:`attnkit.checks`), then the arrays (:mod:`attnkit.array_checks`), then the structure
(:mod:`attnkit.structure_checks`), returning the executors' private description of the
call. :func:`attnkit.multi_head_attention` checks its own arguments in
:mod:`attnkit.multi_head.checks` before it calls the core. A mask checks what it is built
from when it is built
(:mod:`attnkit.masks.validation`), and against the call here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .array_checks import check_arrays, check_mask_shape, check_shapes, one_head_broadcast
from .checks import (
    check_alignment,
    check_dropout_p,
    check_flag,
    check_int,
    check_scale,
)
from .compiling import static_ints
from .errors import ParameterError
from .masks import Geometry, Mask, causal
from .options import Options
from .problem import Problem
from .registry import backend_for
from .score_mods import check_score_mod
from .structure_checks import check_structure, check_window, foreign_mask, structure_of

__all__ = ["IMPLS", "CallInfo", "check_call", "validate"]

IMPLS = ("auto", "generic", "reference")


@dataclass(frozen=True)
class CallInfo:
    """What a validated call is, as a front-end that splits it needs it.

    Shape legend: ``...`` leading dims, Hq query heads, L query length, S key length,
    Ev value features; the output is (*out_lead, L, Ev) with ``out_lead`` = (..., Hq)
    (the broadcast leading dims of query, key and value, heads last).

    Attributes:
        L, S, Ev: query length, key length, value features.
        out_lead: the output's leading dims (..., Hq), broadcast.
        num_heads: Hq (1 for inputs without a head axis).
        gqa_groups: G = Hq // Hkv under ``enable_gqa`` (1 otherwise).
        dtype: the inputs' dtype, also the output's.
        compute_dtype: the dtype scores, softmax and lse are computed in (float32 for
            float16 and bfloat16 inputs).
        scale: the scores' factor (1/sqrt(E) when the call passed None).
        structure: ``is_causal``, ``window`` and a structured ``attn_mask`` combined into
            one :class:`attnkit.masks.Mask`, or None.
        q_offset, kv_offset: absolute positions of the first query and key.
        block_size: the caller's query rows per block, or None (the executor chooses:
            :func:`attnkit.plan.default_block_size`).
    """

    L: int
    S: int
    Ev: int
    out_lead: tuple[int, ...]
    num_heads: int
    gqa_groups: int
    dtype: Any
    compute_dtype: Any
    scale: float
    structure: Any
    q_offset: int
    kv_offset: int
    block_size: int | None
    _problem: Any = field(repr=False, compare=False)  # the executors' own description


def check_call(
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
) -> CallInfo:
    """The :class:`CallInfo` of ``scaled_dot_product_attention`` with these arguments.

    Shapes and semantics are the call's: query (..., Hq, L, E), key (..., Hkv, S, E),
    value (..., Hkv, S, Ev). Raises the call's own errors (``ShapeError``,
    ``DTypeError``, ``ParameterError``, ...), naming the argument and the fix; computes
    nothing.
    """
    p = validate(query, key, value, Options.of(locals()))
    g = p.geometry
    return CallInfo(
        L=p.L,
        S=p.S,
        Ev=p.Ev,
        out_lead=p.out_lead,
        num_heads=p.num_heads,
        gqa_groups=p.gqa_groups,
        dtype=p.dtype,
        compute_dtype=p.compute_dtype,
        scale=p.scale,
        structure=p.structure,
        q_offset=g.q_offset,
        kv_offset=g.kv_offset,
        block_size=p.block_size,
        _problem=p,
    )


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
    if window is not None:
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
    # structure (causal alone, or none: nothing to combine or check against the call)
    geometry = Geometry(L, S, q_offset, kv_offset)
    plain = window is None and sizes is None and o.score_mod is None
    if plain and not isinstance(attn_mask, Mask):
        structure = causal(causal_alignment) if is_causal else None
    else:
        structure = structure_of(is_causal, window, causal_alignment, attn_mask, out_lead, L, S)
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
        score_mod=None if o.score_mod is None else check_score_mod(o.score_mod, num_heads),
        num_heads=num_heads,
        impl=impl,
        need_weights=return_weights,
        need_lse=return_lse,
        block_size=block_size,
    )
