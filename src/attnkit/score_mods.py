"""Score modifiers: functions of (score, query position, key position, head) applied to
the scaled scores before masking and softmax, written once for every backend.

``score_mod=`` of :func:`attnkit.scaled_dot_product_attention` takes one of these or any
elementwise ``f(scores, q_idx, kv_idx, head) -> scores``, as FlexAttention's (the shapes:
that function's docstring); it sees tiles, not whole rows.

For example, ALiBi's slopes, soft-capping and a function of the distance (the first row
of causal attention sees one key, so no modifier changes it)::

    >>> import attnkit as ak
    >>> from attnkit import score_mods
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = (rng.standard_normal((1, 4, 6, 8)) for _ in range(3))  # 4 heads
    >>> plain = ak.scaled_dot_product_attention(q, k, v, is_causal=True)
    >>> alibi = ak.scaled_dot_product_attention(
    ...     q, k, v, is_causal=True, score_mod=score_mods.alibi(4))
    >>> alibi.shape, bool(np.allclose(alibi[..., 0, :], plain[..., 0, :]))
    ((1, 4, 6, 8), True)
    >>> capped = ak.scaled_dot_product_attention(q, k, v, score_mod=score_mods.softcap(50.0))
    >>> decay = ak.scaled_dot_product_attention(  # any elementwise function of the score
    ...     q, k, v, score_mod=lambda s, q_idx, kv_idx, head: s - 0.1 * abs(q_idx - kv_idx))
    >>> decay.shape
    (1, 4, 6, 8)

The examples run on NumPy arrays, with NumPy imported as ``np``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import array_api_compat

from .errors import (
    ArgumentTypeError,
    DTypeError,
    NamespaceMismatchError,
    ParameterError,
    ShapeError,
)
from .shapes import broadcast_shapes, describe

__all__ = [
    "ScoreMod",
    "alibi",
    "alibi_slopes",
    "as_score_mod",
    "check_score_mod",
    "score_mod_derivative",
    "softcap",
]


def _check_num_heads(num_heads: Any, where: str) -> int:
    if isinstance(num_heads, bool) or not isinstance(num_heads, numbers.Integral) or num_heads < 1:
        raise ParameterError(
            f"{where} needs num_heads a positive int (the attention's query heads Hq), got "
            f"{num_heads!r} ({type(num_heads).__name__}); pass the head count, e.g. alibi(8)."
        )
    return int(num_heads)


def alibi_slopes(num_heads: int) -> list[float]:
    """The standard geometric ALiBi slopes (Press et al. 2022): for n a power of two,
    m_h = 2 ** (-8 (h + 1) / n); otherwise those of the closest smaller power of two
    followed by every other slope of the next one (as the reference implementation)."""

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (h + 1) for h in range(n)]

    num_heads = _check_num_heads(num_heads, "alibi_slopes")
    if math.log2(num_heads).is_integer():
        return power_of_two(num_heads)
    closest = 2 ** math.floor(math.log2(num_heads))
    return power_of_two(closest) + power_of_two(2 * closest)[0::2][: num_heads - closest]


@dataclass(frozen=True)
class ScoreMod:
    """A named score modifier: ``fn(scores, q_idx, kv_idx, head, xp) -> scores``.

    ``num_heads`` is the query head count Hq the modifier was built for (ALiBi has one
    slope per head), or None when it works with any number of heads (soft-capping);
    :func:`check_score_mod` compares it with the attention's Hq.
    """

    name: str
    fn: Callable[..., Any]
    num_heads: int | None = None
    #: ``derivative(scores, modified, q_idx, kv_idx, head, xp)``: d fn / d scores, an array
    #: or a Python number (1.0 for an additive bias), for the backward pass; or None.
    derivative: Callable[..., Any] | None = None
    #: A hashable description of everything ``fn`` computes from (``("alibi", slopes)``),
    #: or None: two modifiers with the same key compute the same function, so a compiled
    #: program built for one serves the other (:mod:`attnkit.compiled`).
    key: Any = None

    def __call__(self, scores: Any, q_idx: Any, kv_idx: Any, head: Any) -> Any:
        return self.fn(scores, q_idx, kv_idx, head, array_api_compat.array_namespace(scores))


def alibi(num_heads: int, slopes: list[float] | None = None) -> ScoreMod:
    """ALiBi: ``scores + m_head * (kv_idx - q_idx)`` (a linear penalty on distance to the
    past; pair it with ``is_causal=True`` as the paper does).

    ``num_heads`` must be the query heads Hq of the attention it is used with (one slope
    per head); ``slopes``, if given, ``num_heads`` finite reals (default
    :func:`alibi_slopes`).
    """
    num_heads = _check_num_heads(num_heads, "alibi")
    slopes = alibi_slopes(num_heads) if slopes is None else _check_slopes(slopes, num_heads)

    def fn(scores: Any, q_idx: Any, kv_idx: Any, head: Any, xp: Any) -> Any:
        m = xp.asarray(slopes, dtype=scores.dtype, device=_device(scores))
        m = xp.take(m, xp.reshape(head, (-1,)), axis=0)  # (H,)
        m = xp.reshape(m, head.shape)  # (H, 1, 1) (or the GQA layout)
        return scores + m * xp.astype(kv_idx - q_idx, scores.dtype)

    return ScoreMod(f"alibi({num_heads})", fn, num_heads, _additive, ("alibi", tuple(slopes)))


def _additive(scores: Any, modified: Any, q_idx: Any, kv_idx: Any, head: Any, xp: Any) -> float:
    """The derivative of a bias added to the scores: 1."""
    return 1.0


def _check_slopes(slopes: Any, num_heads: int) -> list[float]:
    try:
        values = list(slopes)
    except TypeError:
        values = None
    if values is None or not all(
        isinstance(m, numbers.Real) and not isinstance(m, bool) and math.isfinite(m) for m in values
    ):
        raise ParameterError(
            f"alibi slopes must be a sequence of {num_heads} finite real numbers (one per head), "
            f"got {slopes!r}; omit slopes for the standard ones (alibi_slopes({num_heads}))."
        )
    if len(values) != num_heads:
        raise ParameterError(
            f"alibi got {len(values)} slopes for num_heads={num_heads}; give one slope per "
            f"head ({num_heads} values) or omit slopes for the standard ones."
        )
    return [float(m) for m in values]


def softcap(cap: float) -> ScoreMod:
    """Soft-capping (Gemma 2, Grok): ``cap * tanh(scores / cap)``, scores stay in (-cap, cap)."""
    if not (
        isinstance(cap, numbers.Real)
        and not isinstance(cap, bool)
        and math.isfinite(cap)
        and cap > 0
    ):
        raise ParameterError(
            f"softcap needs cap a positive finite real number, got {cap!r} "
            f"({type(cap).__name__}); Gemma 2 uses softcap(50.0) for attention logits."
        )
    cap = float(cap)

    def fn(scores: Any, q_idx: Any, kv_idx: Any, head: Any, xp: Any) -> Any:
        return cap * xp.tanh(scores / cap)

    def derivative(scores: Any, modified: Any, q_idx: Any, kv_idx: Any, head: Any, xp: Any) -> Any:
        ratio = modified / cap  # tanh(scores / cap)
        return 1.0 - ratio * ratio

    return ScoreMod(f"softcap({cap})", fn, None, derivative, ("softcap", cap))


def _device(x: Any) -> Any:
    return array_api_compat.device(x)


def as_score_mod(score_mod: Any) -> Callable[..., Any] | None:
    """Validate ``score_mod=``: None, a ScoreMod, or a callable of four arrays."""
    if score_mod is None or callable(score_mod):
        return score_mod
    raise ParameterError(
        f"score_mod must be None or a callable f(scores, q_idx, kv_idx, head) -> scores, got "
        f"{type(score_mod).__name__}; see attnkit.score_mods.alibi and softcap."
    )


def check_score_mod(score_mod: Any, num_heads: int) -> Callable[..., Any] | None:
    """Validate ``score_mod=`` for an attention with ``num_heads`` query heads Hq.

    As :func:`as_score_mod`, and a :class:`ScoreMod` built for a head count (ALiBi) must
    have been built for Hq: ``alibi(3)`` on 4 heads has no slope for the fourth head.
    Raises ``ParameterError`` before any work; returns ``score_mod``.
    """
    score_mod = as_score_mod(score_mod)
    if isinstance(score_mod, ScoreMod) and score_mod.num_heads is not None:
        if score_mod.num_heads != num_heads:
            raise ParameterError(
                f"score_mod {score_mod.name} was built for num_heads={score_mod.num_heads} but "
                f"the attention has Hq={num_heads} query heads; build it for the query's heads, "
                f"e.g. score_mod=attnkit.score_mods.alibi({num_heads})."
            )
    return score_mod


def apply_score_mod(
    score_mod: Callable[..., Any], xp: Any, scores: Any, tile: Any, num_heads: int, groups: int
) -> Any:
    """Call ``score_mod`` on one tile's scores with positions and head indices.

    The result must be an array of the scores' library and a real floating dtype whose
    shape is the scores' shape (or broadcasts to exactly it); anything else raises here,
    naming ``score_mod``, instead of failing later inside a matmul.
    """
    check_score_mod(score_mod, num_heads)
    head = _head_index(xp, scores, tile, num_heads, groups)
    out = score_mod(scores, tile.q_pos(), tile.k_pos, head)
    return _check_result(score_mod, xp, scores, out)


def _head_index(xp: Any, scores: Any, tile: Any, num_heads: int, groups: int) -> Any:
    """Head indices shaped to broadcast against one tile's scores."""
    head = xp.arange(num_heads, device=tile.device)
    if scores.ndim < 3:  # (L, E) inputs: no head axis
        shape: tuple[int, ...] = (1, 1)
    elif groups > 1:
        shape = (num_heads // groups, groups, 1, 1)  # the GQA layout (Hkv, G)
    else:
        shape = (num_heads, 1, 1)
    return xp.reshape(head, shape)


def score_mod_derivative(
    score_mod: Callable[..., Any],
    backend: Any,
    xp: Any,
    scores: Any,
    modified: Any,
    tile: Any,
    num_heads: int,
    groups: int,
) -> Any:
    """d score_mod(scores) / d scores on one tile (an array of the scores' shape, or a
    Python number): a :class:`ScoreMod`'s own ``derivative`` (ALiBi: 1, softcap:
    1 - tanh^2), else the backend's autodiff of the elementwise callable. Raises
    ``ParameterError`` where neither exists (a general callable on NumPy)."""
    head = _head_index(xp, scores, tile, num_heads, groups)
    q_idx, kv_idx = tile.q_pos(), tile.k_pos
    derivative = getattr(score_mod, "derivative", None)
    if derivative is not None:
        return derivative(scores, modified, q_idx, kv_idx, head, xp)
    grad = backend.elementwise_grad(lambda s: score_mod(s, q_idx, kv_idx, head), scores)
    if grad is None:
        name = getattr(score_mod, "name", getattr(score_mod, "__name__", "score_mod"))
        raise ParameterError(
            f"the backward pass needs the derivative of score_mod {name}, and the "
            f"{backend.NAME} backend has no autodiff to take it; use attnkit.score_mods.alibi "
            "or softcap (their derivatives are known), or wrap the callable in "
            "attnkit.score_mods.ScoreMod(name, fn, derivative=...) with its derivative."
        )
    return grad


def _check_result(score_mod: Any, xp: Any, scores: Any, out: Any) -> Any:
    """``out`` as scores: an array of ``scores``' library, real floating, of its shape."""
    name = getattr(score_mod, "name", getattr(score_mod, "__name__", type(score_mod).__name__))
    if not array_api_compat.is_array_api_obj(out):
        raise ArgumentTypeError(
            f"score_mod {name} returned {type(out).__module__}.{type(out).__qualname__}, not an "
            f"array; it must return the modified scores, an array of the scores' shape "
            f"{tuple(scores.shape)} (e.g. return scores + bias, not a Python number)."
        )
    if type(out) is not type(scores) and array_api_compat.array_namespace(out) is not xp:
        raise NamespaceMismatchError(
            f"score_mod {name} returned a {type(out).__module__}.{type(out).__qualname__} but "
            f"the scores are {type(scores).__module__}.{type(scores).__qualname__}; build "
            "every array inside score_mod with the scores' namespace (array_namespace(scores))."
        )
    if not xp.isdtype(out.dtype, "real floating"):
        raise DTypeError(
            f"score_mod {name} returned {describe(out)}, but scores are {describe(scores)}; "
            "return real floating scores (a bool keep/drop decision belongs in attn_mask)."
        )
    expected = tuple(scores.shape)
    got = tuple(out.shape)
    if got != expected:
        if broadcast_shapes(got, expected) != expected:
            raise ShapeError(
                f"score_mod {name} returned shape {got} but the scores it was given have shape "
                f"{expected}; return an array of the scores' shape (score_mod must be "
                "elementwise: combine scores, q_idx, kv_idx and head by broadcasting, never "
                "reduce or reshape them)."
            )
        out = xp.broadcast_to(out, expected)
    return out
