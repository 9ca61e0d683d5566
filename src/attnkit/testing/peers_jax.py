"""JAX's attention functions seen through attnkit's call, for
:func:`attnkit.testing.check_attention` (named by :mod:`attnkit.testing.frameworks`).

``jax_nn`` (``jax.nn.dot_product_attention``) and ``keras`` (Keras 3's
``keras.ops.dot_product_attention``, ``softcap`` as ``attn_logits_soft_cap``; JAX as its
backend unless ``KERAS_BACKEND`` is set), both through
:func:`~attnkit.testing.adapters.time_first` and :func:`jitted` (compiled once per call
signature).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import jax

from .adapters import declare, declared_options, time_first
from .frameworks import by_key
from .run import Unsupported

__all__ = ["jax_nn", "jitted", "keras", "keras_available"]

#: Keyword arguments that are arrays (traced under jit); every other one is static.
_ARRAYS = ("attn_mask",)


def jitted(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` called under ``jax.jit``: query, key, value and ``attn_mask`` traced, the
    other keyword arguments static (as a user's jitted model calls it). One compiled
    function per set of static arguments, so a call signature is compiled once."""
    compiled: dict[tuple[tuple[str, Any], ...], Callable[..., Any]] = {}

    @functools.wraps(fn)
    def run(query: Any, key: Any, value: Any, **kwargs: Any) -> Any:
        arrays = {n: kwargs.pop(n) for n in _ARRAYS if kwargs.get(n) is not None}
        static = tuple(sorted(kwargs.items()))
        if static not in compiled:
            compiled[static] = jax.jit(functools.partial(fn, **kwargs))
        return compiled[static](query, key, value, **arrays)

    return declare(run, **declared_options(fn))


jax_nn = declare(
    jitted(time_first(jax.nn.dot_product_attention, value_like_key=True)),
    **by_key("jax_nn").options(),
)


def _keras_ops() -> Any:
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras

    return keras.ops


def keras_available() -> bool:
    """Whether Keras 3 imports here, on the JAX backend."""
    try:
        _keras_ops()
        import keras
    except Exception:  # not installed, or its backend missing
        return False
    return int(keras.__version__.split(".")[0]) >= 3 and keras.backend.backend() == "jax"


def _keras_attention(
    query: Any,
    key: Any,
    value: Any,
    bias: Any = None,
    mask: Any = None,
    scale: float | None = None,
    is_causal: bool = False,
    attn_logits_soft_cap: float | None = None,
) -> Any:
    if attn_logits_soft_cap is not None and jax.devices()[0].platform != "tpu":
        raise Unsupported("keras.ops.dot_product_attention takes attn_logits_soft_cap on TPU only")
    return _keras_ops().dot_product_attention(
        query,
        key,
        value,
        bias=bias,
        mask=mask,
        scale=scale,
        is_causal=is_causal,
        attn_logits_soft_cap=attn_logits_soft_cap,
    )


keras = declare(
    jitted(
        time_first(
            _keras_attention, window=None, softcap="attn_logits_soft_cap", value_like_key=True
        )
    ),
    **by_key("keras").options(),
)
