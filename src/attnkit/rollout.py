"""Aggregation of attention weights over heads and layers, and attention rollout.

Arrays of the input's library, dtype and device out (16-bit rollout in float32). Shapes::

    one layer           (..., H, L, S)       H heads, L queries, S keys
    a stack of layers   (..., N, H, L, S)    N layers; or a list of N (..., H, L, S)
                                             arrays (Hugging Face ``output_attentions``)

For example, three layers of four heads over five tokens::

    >>> from attnkit.rollout import aggregate, rollout
    >>> w = np.random.default_rng(0).random((3, 4, 5, 5))  # (N, H, L, L)
    >>> w = w / w.sum(-1, keepdims=True)  # rows sum to 1, as softmax weights do
    >>> aggregate(w, over="heads").shape  # the mean over heads, per layer
    (3, 5, 5)
    >>> r = rollout(w)  # (L, L): how much each output token draws on each input token
    >>> r.shape, np.round(r.sum(-1), 6).tolist()
    ((5, 5), [1.0, 1.0, 1.0, 1.0, 1.0])
    >>> rollout(w, all_layers=True).shape  # the rollout at every depth
    (3, 5, 5)

NumPy is imported as ``np``.
"""

from __future__ import annotations

from typing import Any

import array_api_compat as aac

from .checks import check_choice
from .errors import (
    ArgumentTypeError,
    DTypeError,
    NamespaceMismatchError,
    ParameterError,
    ShapeError,
)
from .shapes import describe, type_name

__all__ = ["AGGREGATES", "aggregate", "as_weights", "check_residual", "rollout"]

#: The reductions :func:`aggregate` and :func:`rollout` accept.
AGGREGATES = ("mean", "max")
_AXES = {"heads": (-3,), "layers": (-4,), "all": (-4, -3)}


def _namespace(name: str, x: Any) -> Any:
    if not aac.is_array_api_obj(x):
        raise ArgumentTypeError(
            f"{name} must be an array (NumPy, PyTorch, JAX or any array-API array) or a "
            f"list of per-layer arrays, got {type_name(x)}; convert it first, e.g. "
            f"numpy.asarray({name})."
        )
    xp = aac.array_namespace(x)
    if not xp.isdtype(x.dtype, "real floating"):
        raise DTypeError(
            f"{name} must hold real floating-point attention weights, got {describe(x)}; "
            f"cast it, e.g. {name}.astype('float32')."
        )
    return xp


def as_weights(name: str, weights: Any) -> tuple[Any, Any]:
    """``(xp, array)``: ``weights`` itself, or a sequence of per-layer arrays stacked.

    Raises the typed attnkit errors (naming ``name``) unless ``weights`` holds real
    floating-point arrays of one library and, for a sequence, one shape.

    A list or tuple of N arrays of one shape ``(..., H, L, S)`` (what Hugging Face
    ``output_attentions`` returns) becomes one array ``(..., N, H, L, S)``.
    """
    if isinstance(weights, (list, tuple)):
        if not weights:
            raise ShapeError(f"{name} is an empty sequence; pass at least one layer's weights.")
        namespaces = [_namespace(f"{name}[{i}]", w) for i, w in enumerate(weights)]
        xp = namespaces[0]
        for i, (w, other) in enumerate(zip(weights, namespaces, strict=True)):
            if other is not xp:
                raise NamespaceMismatchError(
                    f"{name}[{i}] is a {type_name(w)} but {name}[0] is a "
                    f"{type_name(weights[0])}; pass every layer from one array library."
                )
            if tuple(w.shape) != tuple(weights[0].shape):
                raise ShapeError(
                    f"{name}[{i}] has shape {tuple(w.shape)} but {name}[0] has "
                    f"{tuple(weights[0].shape)}; every layer must have the same "
                    "(..., heads, L, S) shape to be stacked."
                )
        if weights[0].ndim < 3:
            raise ShapeError(
                f"{name} is a sequence of layers, each of which must have shape "
                f"(..., heads, L, S), but {name}[0] is {describe(weights[0])}; give each "
                "layer a head axis (e.g. w[None] for one head)."
            )
        return xp, xp.stack(list(weights), axis=-4)  # (..., N, H, L, S)
    return _namespace(name, weights), weights


def _reduce(xp: Any, x: Any, how: str, axis: tuple[int, ...]) -> Any:
    return xp.mean(x, axis=axis) if how == "mean" else xp.max(x, axis=axis)


def check_residual(residual: Any) -> None:
    """Raise ``ParameterError`` unless ``residual`` (the identity's share in
    ``residual * I + (1 - residual) * A``) is a real number in [0, 1]."""
    if isinstance(residual, bool) or not isinstance(residual, (int, float)):
        raise ParameterError(f"residual must be a number in [0, 1], got {residual!r}.")
    if not 0.0 <= residual <= 1.0:
        raise ParameterError(
            f"residual must be in [0, 1] (the identity's share; the paper uses 0.5), "
            f"got {residual}."
        )


def aggregate(weights: Any, over: str = "heads", how: str = "mean") -> Any:
    """Reduce attention weights over heads, layers or both.

    Args:
        weights: ``(..., H, L, S)`` for ``over="heads"``; ``(..., N, H, L, S)`` or a list
            of N ``(..., H, L, S)`` arrays for ``over="layers"`` or ``"all"``.
        over: ``"heads"`` (axis -3), ``"layers"`` (axis -4) or ``"all"`` (both).
        how: ``"mean"`` or ``"max"``.

    Returns:
        ``(..., L, S)`` for ``"heads"`` and ``"all"``, ``(..., H, L, S)`` for ``"layers"``.
        The mean of rows that sum to 1 still sums to 1; the max does not (it shows the
        strongest head at each position).

    Equivalent to ``weights.mean(axis=-3)`` (``"heads"``), ``weights.max(axis=(-4, -3))``
    (``"all"``, ``how="max"``), and so on.
    """
    check_choice("over", over, tuple(_AXES))
    check_choice("how", how, AGGREGATES)
    xp, w = as_weights("weights", weights)
    need = 3 if over == "heads" else 4
    if w.ndim < need:
        layout = "(..., H, L, S)" if need == 3 else "(..., N, H, L, S) or a list of layers"
        raise ShapeError(
            f'aggregate(over="{over}") needs weights of shape {layout}, got {describe(w)}.'
        )
    return _reduce(xp, w, how, _AXES[over])


def rollout(
    weights: Any, *, residual: float = 0.5, head: str = "mean", all_layers: bool = False
) -> Any:
    """Attention rollout (Abnar & Zuidema 2020): how much each token flows into each other.

    Each layer's heads are reduced (``head="mean"`` as in the paper, or ``"max"``) to
    ``W_l`` (..., L, L); the residual connection is added as
    ``A_l = (1 - residual) * W_l + residual * I`` and each row of ``A_l`` is divided by
    its sum; the rollout through layer ``l`` is ``R_l = A_l @ A_(l-1) @ ... @ A_0``.
    ``R[i, j]`` is the share of token ``j`` in the representation of token ``i`` after
    layer ``l``; every row sums to 1.

    Args:
        weights: self-attention weights ``(..., N, H, L, L)``, or a list of N arrays
            ``(..., H, L, L)``, layer 0 first.
        residual: the identity's share, in [0, 1]; the paper uses 0.5.
        head: how heads are combined per layer, ``"mean"`` or ``"max"``.
        all_layers: return every ``R_l`` stacked ``(..., N, L, L)`` instead of ``R_(N-1)``.

    Returns:
        ``(..., L, L)`` (or ``(..., N, L, L)``) in the weights' library and device; the
        weights' dtype, or float32 for float16/bfloat16 inputs.

    The plain NumPy equivalent::

        A = (1 - residual) * weights.mean(axis=-3) + residual * np.eye(L)   # (..., N, L, L)
        A = A / A.sum(axis=-1, keepdims=True)
        R = A[..., 0, :, :]
        for l in range(1, N):
            R = A[..., l, :, :] @ R
    """
    check_choice("head", head, AGGREGATES)
    check_residual(residual)
    xp, w = as_weights("weights", weights)
    if w.ndim < 4 or w.shape[-1] != w.shape[-2] or w.shape[-4] == 0:
        raise ShapeError(
            "rollout needs self-attention weights of shape (..., N, H, L, L) (or a list of N "
            f"(..., H, L, L) layers) with N >= 1, got {describe(w)}; rollout composes "
            "layers, so queries and keys must be the same L tokens."
        )
    if w.dtype not in (xp.float32, xp.float64):
        w = xp.astype(w, xp.float32)  # float16/bfloat16: products of N matrices lose digits
    L = w.shape[-1]
    eye = xp.eye(L, dtype=w.dtype, device=aac.device(w))  # (L, L)
    a = (1.0 - residual) * _reduce(xp, w, head, (-3,)) + residual * eye  # (..., N, L, L)
    total = xp.sum(a, axis=-1, keepdims=True)  # (..., N, L, 1)
    # A row that is all zero (residual 0 and a query that attended nothing) stays zero.
    a = a / xp.where(total > 0, total, xp.ones_like(total))  # rows sum to 1
    current = a[..., 0, :, :]  # (..., L, L)
    steps = [current]
    for layer in range(1, w.shape[-4]):
        current = xp.matmul(a[..., layer, :, :], current)  # (..., L, L)
        steps.append(current)
    return xp.stack(steps, axis=-3) if all_layers else current
