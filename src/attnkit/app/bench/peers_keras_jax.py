"""Keras 3's ``keras.ops.dot_product_attention`` on NumPy arrays, for ``attnkit verify``.

Keras runs on a backend chosen by ``KERAS_BACKEND`` before its first import; attnkit
asks for JAX when nothing is set (Keras' own default, TensorFlow, is seldom installed
beside attnkit), and reports the backend Keras actually uses (:func:`keras_backend`).
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["available", "dot_product_attention", "keras_backend"]


def _keras() -> Any:
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras

    return keras


def available() -> bool:
    """Whether Keras 3 imports here (on the backend it is configured for)."""
    try:
        keras = _keras()
    except Exception:  # not installed, or its backend missing
        return False
    return int(keras.__version__.split(".")[0]) >= 3


def keras_backend() -> str:
    """The backend Keras computes on ("jax", "torch", "tensorflow", ...)."""
    return str(_keras().backend.backend())


def dot_product_attention(
    query: Any,
    key: Any,
    value: Any,
    *,
    mask: Any = None,
    bias: Any = None,
    scale: float | None = None,
    is_causal: bool = False,
    dtype: str = "float32",
) -> Any:
    """``keras.ops.dot_product_attention`` in ``dtype``: query (B, L, N, H), key and value
    (B, S, K, H), ``mask`` bool (True = may attend), ``bias`` float, broadcastable to
    (B, N, L, S); returns the output (B, L, N, H) as a NumPy float64 array."""
    import numpy as np

    keras = _keras()
    ops = keras.ops

    def cast(a: Any) -> Any:
        return None if a is None else ops.convert_to_tensor(a, dtype=dtype)

    out = ops.dot_product_attention(
        cast(query),
        cast(key),
        cast(value),
        bias=cast(bias),
        mask=None if mask is None else ops.convert_to_tensor(mask, dtype="bool"),
        scale=scale,
        is_causal=is_causal,
    )
    return np.asarray(
        ops.convert_to_numpy(ops.cast(out, "float32" if dtype != "float64" else dtype)), np.float64
    )
