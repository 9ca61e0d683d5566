"""Score modifiers: functions of (score, query position, key position, head) applied to
the scaled scores before masking and softmax, written once for every backend.

``score_mod=`` of :func:`attnkit.scaled_dot_product_attention` takes one of these or any
callable ``f(scores, q_idx, kv_idx, head) -> scores`` over arrays, as FlexAttention's
``score_mod``: ``scores`` (..., H, Bq, Sk) are the scaled scores of one tile, ``q_idx``
(Bq, 1) and ``kv_idx`` (1, Sk) absolute positions, ``head`` (H, 1, 1) head indices; all
broadcast together. The callable must be elementwise (it sees tiles, not whole rows).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["ScoreMod", "alibi", "alibi_slopes", "as_score_mod", "softcap"]


def alibi_slopes(num_heads: int) -> list[float]:
    """The standard geometric ALiBi slopes (Press et al. 2022): for n a power of two,
    m_h = 2 ** (-8 (h + 1) / n); otherwise those of the closest smaller power of two
    followed by every other slope of the next one (as the reference implementation)."""

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (h + 1) for h in range(n)]

    if num_heads <= 0:
        raise ValueError(f"alibi needs a positive number of heads, got {num_heads}.")
    if math.log2(num_heads).is_integer():
        return power_of_two(num_heads)
    closest = 2 ** math.floor(math.log2(num_heads))
    return power_of_two(closest) + power_of_two(2 * closest)[0::2][: num_heads - closest]


@dataclass(frozen=True)
class ScoreMod:
    """A named score modifier: ``fn(scores, q_idx, kv_idx, head, xp) -> scores``."""

    name: str
    fn: Callable[..., Any]

    def __call__(self, scores: Any, q_idx: Any, kv_idx: Any, head: Any) -> Any:
        import array_api_compat

        return self.fn(scores, q_idx, kv_idx, head, array_api_compat.array_namespace(scores))


def alibi(num_heads: int, slopes: list[float] | None = None) -> ScoreMod:
    """ALiBi: ``scores + m_head * (kv_idx - q_idx)`` (a linear penalty on distance to the
    past; pair it with ``is_causal=True`` as the paper does)."""
    slopes = alibi_slopes(num_heads) if slopes is None else [float(m) for m in slopes]
    if len(slopes) != num_heads:
        raise ValueError(f"alibi got {len(slopes)} slopes for {num_heads} heads.")

    def fn(scores: Any, q_idx: Any, kv_idx: Any, head: Any, xp: Any) -> Any:
        m = xp.asarray(slopes, dtype=scores.dtype, device=_device(scores))
        m = xp.take(m, xp.reshape(head, (-1,)), axis=0)  # (H,)
        m = xp.reshape(m, head.shape)  # (H, 1, 1) (or the GQA layout)
        return scores + m * xp.astype(kv_idx - q_idx, scores.dtype)

    return ScoreMod(f"alibi({num_heads})", fn)


def softcap(cap: float) -> ScoreMod:
    """Soft-capping (Gemma 2, Grok): ``cap * tanh(scores / cap)``, scores stay in (-cap, cap)."""
    if not (
        isinstance(cap, int | float)
        and not isinstance(cap, bool)
        and cap > 0
        and math.isfinite(cap)
    ):
        raise ValueError(f"softcap needs a positive finite cap, got {cap!r}.")

    def fn(scores: Any, q_idx: Any, kv_idx: Any, head: Any, xp: Any) -> Any:
        return cap * xp.tanh(scores / cap)

    return ScoreMod(f"softcap({cap})", fn)


def _device(x: Any) -> Any:
    import array_api_compat

    return array_api_compat.device(x)


def as_score_mod(score_mod: Any) -> Callable[..., Any] | None:
    """Validate ``score_mod=``: None, a ScoreMod, or a callable of four arrays."""
    if score_mod is None or callable(score_mod):
        return score_mod
    from .errors import ParameterError

    raise ParameterError(
        f"score_mod must be None or a callable f(scores, q_idx, kv_idx, head) -> scores, got "
        f"{type(score_mod).__name__}; see attnkit.score_mods.alibi and softcap."
    )


def apply_score_mod(
    score_mod: Callable[..., Any], xp: Any, scores: Any, tile: Any, num_heads: int, groups: int
) -> Any:
    """Call ``score_mod`` on one tile's scores with positions and head indices."""
    head = xp.arange(num_heads, device=tile.device)
    if scores.ndim < 3:  # (L, E) inputs: no head axis
        shape: tuple[int, ...] = (1, 1)
    elif groups > 1:
        shape = (num_heads // groups, groups, 1, 1)  # the GQA layout (Hkv, G)
    else:
        shape = (num_heads, 1, 1)
    head = xp.reshape(head, shape)
    return score_mod(scores, tile.q_pos(), tile.k_pos, head)
