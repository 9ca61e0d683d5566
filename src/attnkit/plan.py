"""One plan per call: validate -> plan -> run.

A :class:`Plan` is everything decided about a call before any array work (the path and
why faster ones were declined, the strategy, sizes, tile table, backward pass), made
once per call (kept per plain signature by :mod:`attnkit._dispatch`) and read by the
forward, the backward and :func:`attnkit.explain`.

The strategies are tried in order (:data:`STRATEGIES`); the first that takes the call
plans it::

    reference     impl="reference": the plain full-matrix formula
    whole call    the backend's fused kernel on the whole call (PyTorch's SDPA)
    tiles         one loop over the tile table that the backend compiles (jax.lax.scan)
    row blocks    query blocks one by one in Python, through the backend's block kernels
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import masks
from .blocked import cost
from .blocked.table import TileTable, band_width, build_band, build_table
from .call_checks import CallInfo
from .errors import ArgumentTypeError, ParameterError
from .problem import Problem
from .shapes import prod

__all__ = [
    "STRATEGIES",
    "Choice",
    "Plan",
    "choose",
    "default_block_size",
    "plan_of",
    "table_of",
]


@dataclass
class Choice:
    """The path a call takes: ``path`` one of "kernel", "blocked kernels", "generic",
    "reference"; ``kernels`` the backend's kernels in use (None: array-API only);
    ``declined`` why faster paths were not taken, in plain words."""

    path: str
    kernels: Any = None
    causal: bool = False  # the whole-call kernel's top-left causal flag
    declined: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Plan:
    """What a validated call runs.

    ``path``: "kernel", "blocked kernels", "generic" or "reference"; ``strategy``: the
    name of the :data:`STRATEGIES` entry that computes it; ``kernels`` the backend's
    kernels in use (None: the array-API arithmetic); ``causal`` the whole-call kernel's
    causal flag; ``declined`` why faster paths and strategies were not taken; ``rows``
    query rows per tile (tiles) or per block (row blocks), None otherwise; ``table`` the
    tile table (tiles); ``grid`` (rows, cols) of the tiles whose liveness row blocks read
    from a mask's data (segment ids: a query block skips other documents' key blocks);
    ``loop`` how the tiles or blocks are iterated, in words.
    """

    path: str
    strategy: str
    kernels: Any = None
    causal: bool = False
    declined: tuple[str, ...] = ()
    rows: int | None = None
    table: TileTable | None = None
    grid: tuple[int, int] | None = None
    loop: str = ""


class Strategy:
    """One way to compute a call: ``takes`` says why not (a string) or None."""

    name = ""

    def takes(self, p: Problem, choice: Choice) -> str | None:
        raise NotImplementedError

    def plan(self, p: Problem, choice: Choice, declined: list[str]) -> Plan:
        return Plan(choice.path, self.name, choice.kernels, choice.causal, tuple(declined))


class _Reference(Strategy):
    name = "reference"

    def takes(self, p: Problem, choice: Choice) -> str | None:
        return None if choice.path == "reference" else "impl is not 'reference'"


class _WholeCall(Strategy):
    name = "whole call"

    def takes(self, p: Problem, choice: Choice) -> str | None:
        return None if choice.path == "kernel" else "no whole-call kernel takes it"


class _Tiles(Strategy):
    name = "tiles"

    def takes(self, p: Problem, choice: Choice) -> str | None:
        if p.backend.map_blocks is None:
            return f"the {p.backend.NAME} backend compiles no loop (a Python loop runs blocks)"
        if choice.path == "blocked kernels":
            return "the backend's block kernels take the blocks"
        return None

    def plan(self, p: Problem, choice: Choice, declined: list[str]) -> Plan:
        heads = max(1, prod(p.out_lead))
        table = None
        if not p.need_weights:  # weights are placed on the grid
            rows = p.block_size or cost.choose_band_rows(p, heads)
            width = band_width(p, rows)
            if width is not None and 0 < width <= min(cost.BAND_WIDTH_ROWS * rows, p.S // 2):
                table = table_of(p, rows, -(-width // 16) * 16, band=True)
        if table is None:
            size = p.block_size or cost.choose_tile_size(p, heads)
            table = table_of(p, size, size, padded=True)
        size = table.rows
        return Plan(
            choice.path, self.name, choice.kernels, choice.causal, tuple(declined), size, table,
            None, p.backend.map_blocks_loop,
        )  # fmt: skip


class _RowBlocks(Strategy):
    name = "row blocks"

    def takes(self, p: Problem, choice: Choice) -> str | None:
        return None

    def plan(self, p: Problem, choice: Choice, declined: list[str]) -> Plan:
        rows = p.block_size or cost.choose_block_size(p, p.out_lead, choice.kernels)
        grid = None
        if p.L and p.S and p.structure is not None and p.structure.holds_data:
            grid = (rows, max(rows, cost.SKIP_COLUMNS))  # query blocks skip dead key blocks
        return Plan(
            choice.path, self.name, choice.kernels, choice.causal, tuple(declined), rows, None,
            grid, "a Python loop over the query blocks",
        )  # fmt: skip


#: Tile tables of static structures by (structure, geometry, tile, padding, attn_mask):
#: a table is Python arithmetic over every tile, worth keeping for repeated calls.
_TABLES: dict[tuple[Any, ...], TileTable] = {}
_TABLES_MAX = 64


def table_of(
    p: Problem, rows: int, cols: int, padded: bool = False, band: bool = False
) -> TileTable:
    """:func:`attnkit.blocked.table.build_table` (``band``: :func:`~attnkit.blocked.table.
    build_band`), cached for structures that hold no arrays (a mask holding data is
    neither hashed by value nor kept alive here)."""
    s, g = p.structure, p.geometry

    def build() -> TileTable:
        return build_band(p, rows, cols) if band else build_table(p, rows, cols, padded)

    if s is not None and s.holds_data:
        return build()
    key = (s, g.L, g.S, g.q_offset, g.kv_offset, rows, cols, padded, band, p.mask is not None)
    try:
        table = _TABLES.get(key)
    except TypeError:  # an unhashable structure
        return build()
    if table is None:
        if len(_TABLES) >= _TABLES_MAX:
            _TABLES.clear()
        table = _TABLES[key] = build()
    return table


#: The strategies, tried in order; the first that takes a call plans it.
STRATEGIES: tuple[Strategy, ...] = (_Reference(), _WholeCall(), _Tiles(), _RowBlocks())


def plan_of(p: Problem, whole_call: bool = True) -> Plan:
    """The plan of a validated call (no array work). ``whole_call=False``: the plan
    without the whole-call kernel (it declined this call's values: a NaN at a masked
    position), the backend's block kernels instead."""
    choice = choose(p)
    if not whole_call and choice.path == "kernel":
        reason = "whole-call kernel: declined on the values (a NaN or inf where pairs are masked)"
        choice = Choice("blocked kernels", choice.kernels, declined=[reason])
    declined = list(choice.declined)
    for strategy in STRATEGIES:
        why = strategy.takes(p, choice)
        if why is None:
            return strategy.plan(p, choice, declined)
        if strategy.name not in ("reference", "whole call"):
            declined.append(f"{strategy.name}: {why}")
    raise AssertionError("the row-blocks strategy takes every call")


def choose(p: Problem) -> Choice:
    """The path of a validated call and why faster paths were declined (no array work:
    the whole-call kernel may still decline on the values, e.g. a NaN at a masked
    position, and the blocked executor then takes the call)."""
    if p.impl == "reference":
        return Choice("reference", declined=['impl="reference" asks for the plain formula'])
    if p.impl == "generic":
        return Choice("generic", declined=['impl="generic" asks for the array-API executor'])
    kernels = p.backend.kernels
    declined = []
    if kernels.attention is None:
        declined.append(f"the {p.backend.NAME} backend has no whole-call kernel")
    else:
        reasons, causal = _whole_call_declines(p)
        if not reasons and kernels.attention_declines is not None:
            why = kernels.attention_declines(
                p.query, p.key, p.value, mask=p.mask, causal=causal, scale=p.scale,
                gqa=p.gqa_groups > 1,
            )  # fmt: skip
            reasons = [] if why is None else [why]
        if not reasons:
            return Choice("kernel", kernels, causal)
        declined += [f"whole-call kernel: {reason}" for reason in reasons]
    if kernels.block is None and kernels.run is None:
        declined.append(f"the {p.backend.NAME} backend has no block kernels")
        return Choice("generic", declined=declined)
    if not _block_kernels_apply(p, kernels):
        declined.append("block kernels: dropout, weights, lse or a score_mod are computed here")
        return Choice("generic", declined=declined)
    return Choice("blocked kernels", kernels, declined=declined)


def _block_kernels_apply(p: Problem, kernels: Any) -> bool:
    """Block kernels draw no dropout, give no weights and take no score_mod; they give
    the lse where the backend's do (``Kernels.block_lse``: a forward saving for the
    backward pass)."""
    if p.need_weights or p.dropout_p > 0 or p.score_mod is not None:
        return False
    return not p.need_lse or kernels.block_lse is not None


def _whole_call_declines(p: Problem) -> tuple[list[str], bool]:
    """Why the semantics of a whole-call kernel (no dropout, weights, lse, score_mod,
    window or structured mask that leaves out a pair; causal only top-left with the
    diagonal at position 0 and without a mask) differ from this call's; and whether the
    call is that causal."""
    reasons = []
    if p.dropout_p > 0:
        reasons.append("dropout draws from attnkit's explicit rng")
    if p.need_weights or p.need_lse:
        reasons.append("weights or lse are asked for")
    if p.score_mod is not None:
        reasons.append("a score_mod")
    if p.L == 0 or p.S == 0:
        reasons.append("a zero-length axis")
    causal = _plain_causal(p)
    if p.structure is not None and not causal and not _allows_every_pair(p):
        reasons.append("a window or structured mask (the executor skips its blocks)")
    if causal and p.mask is not None:
        reasons.append("is_causal together with attn_mask")
    return reasons, causal


def _allows_every_pair(p: Problem) -> bool:
    """Whether the structure allows every (query, key) pair of the call, from static ints
    (a decoding step's bottom-right causal row, a window wider than the keys): the
    whole-call kernel then runs the call without it."""
    s = p.structure
    return not s.holds_data and s.tile_kind(p.geometry, 0, p.L, 0, p.S) == masks.FULL


_CAUSAL = (masks.causal("top_left"), masks.causal("bottom_right"))


def _plain_causal(p: Problem) -> bool:
    """Whether the structure is exactly top-left is_causal: key j <= query i, diagonal at 0."""
    s, g = p.structure, p.geometry
    if s is None or s not in _CAUSAL:
        return False
    shift = g.S - g.L if s == _CAUSAL[1] else 0
    return g.q_offset + shift == g.kv_offset


def default_block_size(call: CallInfo, share: int = 1) -> int:
    """Query rows per block the executor would choose for ``call``, with its score
    budget (``DEFAULT_BLOCK_BUDGET`` elements) divided by ``share``.

    A block holds rows x S_local x heads scores; when P processes each hold one shard of
    the sequence, ``share=P`` keeps the blocks' memory falling as 1/P with the rest.
    """
    if not isinstance(call, CallInfo):
        raise ArgumentTypeError(
            f"default_block_size: call must be the CallInfo that attnkit.call_checks.check_call "
            f"returns, got {type(call).__name__}."
        )
    if isinstance(share, bool) or not isinstance(share, int) or share < 1:
        raise ParameterError(f"default_block_size: share must be an int >= 1, got {share!r}.")
    budget = max(1, cost.DEFAULT_BLOCK_BUDGET // share)
    p = call._problem
    return cost.choose_block_size(p, p.out_lead, None, budget=budget)
