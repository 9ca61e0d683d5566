"""The checks of :func:`attnkit.scaled_dot_product_attention`, without the computation.

For front-ends that split one call into pieces (ring and Ulysses attention, a caller's
own blocking): :func:`check_call` raises exactly the errors the call would raise, before
any work, and returns its :class:`CallInfo` (shapes, dtypes, the mask's structure, the
block size); :func:`default_block_size` is the executor's choice of rows per block.

Every check lives in this package, behind one entry, :func:`validate` (``._call``): plain
arguments (:mod:`attnkit.checks`), then the arrays (``._arrays``), then the structure
(``._structure``). Multi-head's own arguments: ``._multi_head``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._problem import Problem  # noqa: F401  (kept importable: it was exported here)
from ..blocked.cost import DEFAULT_BLOCK_BUDGET, choose_block_size
from ..errors import ParameterError
from ..options import Options
from ._call import validate  # the one entry: (query, key, value, options) -> Problem

__all__ = ["CallInfo", "check_call", "default_block_size"]


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
            :func:`default_block_size`).
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


def default_block_size(call: CallInfo, share: int = 1) -> int:
    """Query rows per block the executor would choose for ``call``, with its score
    budget (``DEFAULT_BLOCK_BUDGET`` elements) divided by ``share``.

    A block holds rows x S_local x heads scores; when P processes each hold one shard of
    the sequence, ``share=P`` keeps the blocks' memory falling as 1/P with the rest.
    """
    if isinstance(share, bool) or not isinstance(share, int) or share < 1:
        raise ParameterError(f"default_block_size: share must be an int >= 1, got {share!r}.")
    budget = max(1, DEFAULT_BLOCK_BUDGET // share)
    p = call._problem if isinstance(call, CallInfo) else call  # a Problem: earlier callers
    return choose_block_size(p, p.out_lead, None, budget=budget)
