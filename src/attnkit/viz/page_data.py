"""The interactive page's data: weights and query/key vectors, validated and encoded.

One sentence is a JSON dict of its tokens, its entries (one per layer, then rollout and
flow) and the neuron view's vectors. Encodings, deflated unless ``compress=False``, then
base64: weights at 8 bits relative to each head's maximum,
``value = byte / 255 * scales[head]``; vectors at 8 bits signed around 128,
``value = (byte - 128) / 127 * scales[head]``.
"""

from __future__ import annotations

import base64
import zlib
from typing import Any

from attnkit.errors import ParameterError, ShapeError
from attnkit.shapes import describe

from ._checks import as_weights, check_tokens, squeeze_to
from .plots import to_numpy

__all__ = [
    "HEAD_CHOICES",
    "Vectors",
    "encode_vectors",
    "encode_weights",
    "stack_of",
    "tokens_of",
    "vectors_of",
]

#: The combinations of heads the page offers (besides one head or a chosen subset).
HEAD_CHOICES = ("mean", "max", "all")


def _pack(codes: Any, compress: bool) -> str:
    raw = codes.tobytes()
    return base64.b64encode(zlib.compress(raw, 6) if compress else raw).decode("ascii")


def stack_of(name: str, weights: Any) -> tuple[Any, Any]:
    """(xp, weights as (N, H, L, S)): one head (L, S) and one layer (H, L, S) are lifted."""
    xp, w = as_weights(name, weights)
    if w.ndim in (2, 3):
        return xp, xp.reshape(w, (1,) * (4 - w.ndim) + tuple(w.shape))  # (N, H, L, S)
    fix = "pass one sequence: (N, H, L, S), one layer (H, L, S) or one head (L, S)."
    return xp, squeeze_to(name, xp, w, 4, "(N, H, L, S)", fix)


def encode_weights(
    xp: Any, w: Any, name: str, heads: list[str], *, kind: str, compress: bool
) -> dict[str, Any]:
    """One page entry of weights ``(heads, L, S)``: 8-bit codes relative to each head's max.

    NaN (a row the model left undefined) is shown as 0; stray negatives are clipped.
    """
    w = xp.where(xp.isnan(w), xp.zeros_like(w), w)
    w = xp.where(w > 0, w, xp.zeros_like(w))
    top = xp.max(w, axis=(-2, -1), keepdims=True)  # (heads, 1, 1)
    safe = xp.where(top > 0, top, xp.ones_like(top))
    codes = to_numpy(xp, xp.astype(xp.round(w / safe * 255.0), xp.uint8))  # (heads, L, S)
    scales = to_numpy(xp, xp.reshape(top, (-1,)))  # (heads,)
    return {
        "name": name,
        "kind": kind,
        "heads": heads,
        "scales": [float(s) for s in scales.tolist()],
        "data": _pack(codes, compress),
    }


class Vectors:
    """Validated query and key vectors of every layer, for the neuron view.

    ``queries`` (N, H, L, E) and ``keys`` (N, Hkv, S, E) with H % Hkv == 0 (grouped
    query attention: query head h uses key head h // (H // Hkv)), as the scores use them
    (after any rotary embedding): ``score[i, j] = scale * q[i] . k[j]`` (+ the mask).
    """

    def __init__(self, xp: Any, queries: Any, keys: Any, scale: float) -> None:
        self.xp, self.queries, self.keys, self.scale = xp, queries, keys, scale


def vectors_of(queries: Any, keys: Any, scale: Any, shape: tuple[int, int, int, int]) -> Any:
    """:class:`Vectors` for weights of ``shape`` (N, H, L, S), or None without vectors."""
    if queries is None and keys is None:
        if scale is not None:
            raise ParameterError("scale is given without queries and keys; pass all three.")
        return None
    if queries is None or keys is None:
        missing = "keys" if keys is None else "queries"
        raise ParameterError(
            f"the neuron view needs both queries and keys; {missing} is missing. Pass "
            "queries (N, H, L, E) and keys (N, Hkv, S, E), or neither."
        )
    N, H, L, S = shape
    fix = "pass every layer's vectors, (N, H, L, E) for queries and (N, Hkv, S, E) for keys."
    xq, q = as_weights("queries", queries)
    xk, k = as_weights("keys", keys)
    q = squeeze_to("queries", xq, q, 4, "(N, H, L, E)", fix)
    k = squeeze_to("keys", xk, k, 4, "(N, Hkv, S, E)", fix)
    if tuple(q.shape[:3]) != (N, H, L):
        raise ShapeError(
            f"queries {describe(q)} do not match the weights' (N, H, L) = {(N, H, L)}; {fix}"
        )
    Hkv = k.shape[1]
    if k.shape[0] != N or k.shape[2] != S or Hkv == 0 or H % Hkv:
        raise ShapeError(
            f"keys {describe(k)} do not match the weights (N, H, S) = {(N, H, S)}: expected "
            f"(N, Hkv, S, E) with N = {N}, S = {S} and H = {H} a multiple of Hkv; {fix}"
        )
    if k.shape[3] != q.shape[3]:
        raise ShapeError(
            f"queries have {q.shape[3]} features but keys {k.shape[3]}: queries "
            f"{describe(q)}, keys {describe(k)}; pass the vectors the scores are made of."
        )
    E = q.shape[3]
    if scale is None:
        scale = 1.0 / E**0.5 if E else 1.0
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale != scale:
        raise ParameterError(f"scale must be a number (score = scale * q . k), got {scale!r}.")
    return Vectors(xq, to_numpy(xq, q), to_numpy(xk, k), float(scale))


def _signed_codes(x: Any) -> tuple[Any, list[float]]:
    """(uint8 codes of (heads, T, E) around 128, each head's largest magnitude)."""
    import numpy as np

    x = np.nan_to_num(np.asarray(x, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    top = np.abs(x).max(axis=(-2, -1), keepdims=True) if x.size else np.ones((x.shape[0], 1, 1))
    safe = np.where(top > 0, top, 1.0)
    codes = (np.round(x / safe * 127.0) + 128).astype(np.uint8)  # (heads, T, E)
    return codes, [float(t) for t in top.reshape(-1)]


def encode_vectors(vectors: Any, *, compress: bool) -> dict[str, Any]:
    """The neuron view's data: per layer the query and key codes, and the score scale."""
    layers = []
    for n in range(vectors.queries.shape[0]):
        q_codes, q_scales = _signed_codes(vectors.queries[n])  # (H, L, E)
        k_codes, k_scales = _signed_codes(vectors.keys[n])  # (Hkv, S, E)
        layers.append(
            {
                "q": {"data": _pack(q_codes, compress), "scales": q_scales},
                "k": {"data": _pack(k_codes, compress), "scales": k_scales},
            }
        )
    return {
        "dim": int(vectors.queries.shape[3]),
        "kv_heads": int(vectors.keys.shape[1]),
        "scale": vectors.scale,
        "layers": layers,
    }


def tokens_of(tokens: Any, key_tokens: Any, L: int, S: int) -> tuple[list[str], list[str]]:
    """(L query labels, S key labels): the key labels are the query labels when S == L."""
    q = check_tokens("tokens", tokens, L, "queries (axis -2)")
    if key_tokens is None and tokens is not None and L == S:
        return q, q
    return q, check_tokens("key_tokens", key_tokens, S, "keys (axis -1)")
