"""One sentence of the interactive page: weights, tokens, rollout, flow and vectors.

:func:`sentence_data` validates one sentence's arrays and builds its JSON, encoded by
:mod:`.page_data`.
"""

from __future__ import annotations

from typing import Any

from attnkit.errors import ParameterError, ShapeError
from attnkit.rollout import rollout as _rollout
from attnkit.shapes import describe

from .page_data import encode_vectors, encode_weights, stack_of, tokens_of, vectors_of
from .plots import to_numpy

__all__ = ["FLOW_TOKENS", "sentence_data"]

#: The page computes the attention flow by default up to this many tokens: one max-flow
#: per token pair on the layered graph costs about N L^4 in all (20 s at 64 tokens).
FLOW_TOKENS = 32


def _flow(xp: Any, w: Any, wanted: bool | None, compress: bool) -> dict[str, Any]:
    """The flow entry, or ``{"note": why not}``."""
    N, _, L, S = w.shape
    if wanted is False:
        return {"note": "not asked for (flow=False)"}
    if L != S:
        if wanted:
            raise ShapeError(
                f"flow=True needs self-attention (L == S), got weights {describe(w)}; "
                "pass flow=False."
            )
        return {"note": "it needs self-attention (queries = keys)"}
    if wanted is None and L > FLOW_TOKENS:
        return {
            "note": f"computed by default up to {FLOW_TOKENS} tokens (a max-flow per token "
            f"pair; this sentence has {L}); pass flow=True to compute it, or see the rollout"
        }
    from .flow import attention_flow

    matrix = attention_flow(to_numpy(xp, w), max_tokens=max(L, FLOW_TOKENS))  # (L, L)
    import numpy as np

    entry = encode_weights(
        np,
        np.asarray(matrix, dtype=np.float64)[None],  # (1, L, L)
        "attention flow",
        [f"through layer {N - 1}"],
        kind="flow",
        compress=compress,
    )
    return entry


def sentence_data(
    weights: Any,
    tokens: Any = None,
    key_tokens: Any = None,
    queries: Any = None,
    keys: Any = None,
    scale: Any = None,
    *,
    name: str,
    rollout: bool | None,
    flow: bool | None,
    compress: bool,
) -> tuple[dict[str, Any], tuple[int, int, int, int]]:
    """(the sentence's JSON, its weights' shape (N, H, L, S))."""
    xp, w = stack_of("weights", weights)  # (N, H, L, S)
    N, H, L, S = (int(n) for n in w.shape)
    if N == 0 or H == 0:
        raise ShapeError(f"weights {describe(w)} have no layer or no head; nothing to show.")
    q, k = tokens_of(tokens, key_tokens, L, S)
    vectors = vectors_of(queries, keys, scale, (N, H, L, S))
    with_rollout = (L == S) if rollout is None else bool(rollout)
    if with_rollout and L != S:
        raise ShapeError(
            f"rollout=True needs self-attention (L == S), got weights {describe(w)}; "
            "pass rollout=False."
        )
    if flow is not None and not isinstance(flow, bool):
        raise ParameterError(f"flow must be True, False or None (automatic), got {flow!r}.")
    head_names = [f"head {h}" for h in range(H)]
    layers = [
        encode_weights(xp, w[n], f"layer {n}", head_names, kind="layer", compress=compress)
        for n in range(N)
    ]
    rolled = None
    if with_rollout:
        r = _rollout(w, all_layers=True)  # (N, L, L)
        depths = [f"through layer {n}" for n in range(N)]
        rolled = encode_weights(xp, r, "rollout", depths, kind="rollout", compress=compress)
    data = {
        "name": name,
        "meta": f"{N} layer(s) x {H} head(s), {L} queries x {S} keys",
        "queries": q,
        "keys": k,
        "layers": layers,
        "rollout": rolled,
        "flow": _flow(xp, w, flow, compress),
        "vectors": None if vectors is None else encode_vectors(vectors, compress=compress),
        "vectors_note": ""
        if vectors is not None
        else "pass queries= and keys= (the "
        "vectors the scores are made of; attnkit viz records them)",
    }
    return data, (N, H, L, S)
