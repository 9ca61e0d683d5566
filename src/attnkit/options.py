"""The options of one attention call: every argument but the three arrays, in one place.

:func:`attnkit.scaled_dot_product_attention`, :func:`attnkit.explain`,
:func:`attnkit.attention_vjp` and :func:`attnkit.call_checks.check_call` keep their
signatures; each builds one :class:`Options` from its keyword arguments, and everything
downstream takes ``(query, key, value, options)``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["ARRAY_NAMES", "OPTION_NAMES", "Options"]


class Options(NamedTuple):
    """The non-array arguments of an attention call, as the caller passed them
    (unvalidated: :func:`attnkit.call_checks.validate` checks them, once, with the arrays).

    A named tuple rather than a frozen dataclass: as immutable, and built in 0.4 µs
    instead of 2 µs, which a decoding step's call would pay every time.

    Fields (defaults as :func:`attnkit.scaled_dot_product_attention`):
        attn_mask: None, a bool array (True = may attend), an additive float array, a
            framework's mask object, or an :mod:`attnkit.masks` structure.
        dropout_p: probability of zeroing a weight after the softmax.
        is_causal: key position <= query position.
        scale: the scores' factor; None means 1/sqrt(E).
        enable_gqa: grouped-query attention when Hq != Hkv.
        causal_alignment: ``"top_left"`` or ``"bottom_right"`` (where the diagonal sits).
        window: None, an int W, a (left, right) pair, or an :mod:`attnkit.masks` mask.
        return_weights: also return the attention weights (..., Hq, L, S).
        return_lse: also return the rows' log-sum-exp (..., Hq, L).
        q_offset, kv_offset: absolute positions of the first query and key.
        rng: the backend's generator (dropout only).
        impl: ``"auto"``, ``"generic"`` or ``"reference"``.
        block_size: query rows per block of the blocked executor; None chooses.
        score_mod: None or ``f(scores, q_idx, kv_idx, head) -> scores``.
    """

    attn_mask: Any = None
    dropout_p: float = 0.0
    is_causal: bool = False
    scale: float | None = None
    enable_gqa: bool = False
    causal_alignment: str = "top_left"
    window: Any = None
    return_weights: bool = False
    return_lse: bool = False
    q_offset: int = 0
    kv_offset: int = 0
    rng: Any = None
    impl: str = "auto"
    block_size: int | None = None
    score_mod: Any = None

    @classmethod
    def of(cls, arguments: dict[str, Any]) -> Options:
        """The options among a public function's arguments (its ``locals()`` on entry),
        absent ones at their defaults (:func:`attnkit.attention_vjp` has no
        ``return_weights``): the public signatures list the parameters, and this builds
        the options from them without listing them again. A name that is neither an
        option nor one of the arrays (:data:`ARRAY_NAMES`) raises ``TypeError``: a
        signature whose parameter is misspelled would otherwise pass its default."""
        if len(arguments) == _EVERY:  # query, key, value and every option: the fast path
            try:  # (torch.compile traces this; not itemgetter)
                return _NEW(cls, [arguments[name] for name in OPTION_NAMES])
            except KeyError:
                pass
        unknown = arguments.keys() - _KNOWN
        if unknown:
            raise TypeError(
                f"Options.of: {sorted(unknown)} are not options of an attention call "
                f"(options: {', '.join(OPTION_NAMES)}; arrays: {', '.join(ARRAY_NAMES)}); "
                "name the public function's parameters after the Options fields."
            )
        get = arguments.get
        return cls._make([get(name, default) for name, default in _DEFAULTS])


#: The options' names, in the public signature's order.
OPTION_NAMES: tuple[str, ...] = Options._fields
_DEFAULTS = tuple(Options._field_defaults.items())
_NEW = tuple.__new__
#: The array parameters of the public functions that take options: the call's three, and
#: the saved output, lse and cotangent of the key-block backward (partial_attention_vjp).
ARRAY_NAMES: tuple[str, ...] = ("query", "key", "value", "out", "lse", "d_out")
_KNOWN = frozenset(OPTION_NAMES + ARRAY_NAMES)
_EVERY = len(OPTION_NAMES) + 3
