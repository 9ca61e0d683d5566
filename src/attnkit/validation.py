"""The checks of :func:`attnkit.scaled_dot_product_attention`, without the computation.

For front-ends that split one call into pieces (ring and Ulysses attention over devices
or processes, a caller's own blocking): :func:`check_call` raises exactly the errors the
call would raise, before any work, and returns the :class:`attnkit.problem.Problem` the
executors would work from (shapes, dtypes, the structure of the mask, the block size);
:func:`default_block_size` is the executor's own choice of query rows per block, with its
memory budget shared among processes when each holds one shard.
"""

from __future__ import annotations

from typing import Any

from ._validate import validate
from .blocked.cost import DEFAULT_BLOCK_BUDGET, choose_block_size
from .errors import ParameterError
from .options import Options
from .problem import Problem

__all__ = ["Problem", "check_call", "default_block_size"]


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
) -> Problem:
    """The :class:`Problem` of ``scaled_dot_product_attention`` with these arguments.

    Shapes and semantics are the call's: query (..., Hq, L, E), key (..., Hkv, S, E),
    value (..., Hkv, S, Ev). Raises the call's own errors (``ShapeError``,
    ``DTypeError``, ``ParameterError``, ...), naming the argument and the fix; computes
    nothing.
    """
    options = Options.of(locals())  # the non-array arguments, by name
    return validate(query, key, value, options)


def default_block_size(problem: Problem, share: int = 1) -> int:
    """Query rows per block the executor would choose for ``problem``, with its score
    budget (``DEFAULT_BLOCK_BUDGET`` elements) divided by ``share``.

    A block holds rows x S_local x heads scores; when P processes each hold one shard of
    the sequence, ``share=P`` keeps the blocks' memory falling as 1/P with the rest.
    """
    if isinstance(share, bool) or not isinstance(share, int) or share < 1:
        raise ParameterError(f"default_block_size: share must be an int >= 1, got {share!r}.")
    budget = max(1, DEFAULT_BLOCK_BUDGET // share)
    return choose_block_size(problem, problem.out_lead, None, budget=budget)
