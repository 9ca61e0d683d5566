"""Golden vectors in a framework's layout, for ``attnkit verify``: the causal and window
rules as explicit masks where a framework has no such option, every vector as
(B, H, L, E), and values padded to the key's head size where a framework needs Ev == E
(exact: attention is linear in the value). Each adaptation is said in a note.

A vector is anything with the attributes of :class:`GoldenVector` (the application's
``attnkit.app.verify.Vector``); its arrays are NumPy arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

__all__ = [
    "GoldenVector",
    "bhle",
    "combined_mask",
    "heads_first",
    "structure",
    "time_first",
    "value_like_key",
]


class GoldenVector(Protocol):
    """What the layout reads of a golden vector: float64 inputs and the call's kwargs."""

    query: Any  # (..., Hq, L, E) or (B, L, E) or (L, E)
    key: Any  # (..., Hk, S, E)
    value: Any  # (..., Hk, S, Ev)
    attn_mask: Any  # bool or float, broadcastable to (..., Hq, L, S), or None
    kwargs: dict[str, Any]
    out: Any  # (..., Hq, L, Ev): the oracle's output


def structure(vector: GoldenVector) -> Any:
    """The causal/window rule of the kwargs as a bool (L, S) mask, or None if none."""
    kw = vector.kwargs
    causal, window = kw.get("is_causal", False), kw.get("window")
    if not causal and window is None:
        return None
    L, S = vector.query.shape[-2], vector.key.shape[-2]
    shift = S - L if kw.get("causal_alignment", "top_left") == "bottom_right" else 0
    i = np.arange(L)[:, None] + shift + kw.get("q_offset", 0)  # absolute query positions
    j = np.arange(S)[None, :] + kw.get("kv_offset", 0)  # absolute key positions
    allowed = np.ones((L, S), dtype=bool)
    if causal:
        allowed &= j <= i
    if window is not None:
        left, right = (window, window) if isinstance(window, int) else window
        if left is not None:
            allowed &= j >= i - left
        if right is not None:
            allowed &= j <= i + right
    return allowed


def combined_mask(vector: GoldenVector, top_left_ok: bool) -> tuple[Any, bool, str]:
    """(mask for the framework, is_causal, note): the structure as an explicit mask
    unless the framework's own top-left ``is_causal`` says the same."""
    kw, user = vector.kwargs, vector.attn_mask
    rule = structure(vector)
    if rule is None:
        return user, False, ""
    simple = kw.get("causal_alignment", "top_left") == "top_left" and "window" not in kw
    if simple and top_left_ok and user is None and not kw.get("q_offset", 0):
        return None, True, ""
    rules = []
    if kw.get("is_causal"):
        rules.append(f"causal {kw.get('causal_alignment', 'top_left')}")
    if "window" in kw:
        rules.append(f"window={kw['window']}")
    if kw.get("q_offset") or kw.get("kv_offset"):
        rules.append("position offsets")
    note = f"{' and '.join(rules)} as an explicit bool mask"
    if user is None:
        return rule, False, note
    if user.dtype == bool:
        return user & rule, False, note
    return np.where(rule, user, -np.inf), False, note


def bhle(vector: GoldenVector, mask: Any) -> tuple[Any, ...]:
    """query, key, value as (B, H, L, E) and the mask as (B, H|1, L, S) (or None)."""
    q, k, v = vector.query, vector.key, vector.value
    if q.ndim == 2:  # (L, E): one batch entry, one head
        q, k, v = (x[None, None] for x in (q, k, v))
    elif q.ndim == 3:  # (B, L, E): one head
        lead = np.broadcast_shapes(q.shape[:1], k.shape[:1], v.shape[:1])
        q, k, v = (np.broadcast_to(x, (*lead, *x.shape[-2:]))[:, None] for x in (q, k, v))
    else:  # (..., H, L, E): the leading dims flattened into B
        lead = np.broadcast_shapes(*(x.shape[:-3] for x in (q, k, v)))
        B = int(np.prod(lead))
        q, k, v = (np.broadcast_to(x, (*lead, *x.shape[-3:])) for x in (q, k, v))
        q, k, v = (x.reshape(B, *x.shape[-3:]) for x in (q, k, v))
    B, H, L, _ = q.shape
    if mask is not None:
        S = k.shape[-2]
        mask = np.broadcast_to(mask, (*vector.out.shape[:-1], S)).reshape(B, H, L, S)
    return q, k, v, mask


def value_like_key(v: Any, E: int, notes: list[str]) -> tuple[Any, int]:
    """value (..., Ev) zero-padded to a multiple of E columns (exact: attention is linear
    in the value), and how many chunks of E it is."""
    Ev = v.shape[-1]
    chunks = max(1, -(-Ev // E)) if E else 1
    if Ev != E and E:
        pieces = f"zero-padded to E={E}" if Ev < E else f"run as {chunks} chunks of E={E}"
        notes.append(f"value Ev={Ev} {pieces} columns (it needs Ev == E)")
        v = np.concatenate([v, np.zeros((*v.shape[:-1], chunks * E - Ev))], axis=-1)
    return v, chunks


Runner = Callable[[GoldenVector, str], tuple[Any, list[str]]]


def heads_first(run: Callable[..., Any], top_left_ok: bool, one_head_size: bool = False) -> Runner:
    """A runner for a (B, H, L, E) function ``run(q, k, v, mask, dtype=, scale=[, is_causal=])``:
    ``runner(vector, dtype) -> (output shaped like vector.out, adaptation notes)``.
    ``one_head_size``: the function has one head count, one head size and the default
    scale (MultiheadAttention): key/value heads repeated, value padded to E, the scale
    folded into the query, each said in the notes (all exact but for rounding)."""

    def runner(vector: GoldenVector, dtype: str) -> tuple[Any, list[str]]:
        mask, causal, note = combined_mask(vector, top_left_ok)
        q, k, v, mask = bhle(vector, mask)
        notes = [note] if note else []
        options: dict[str, Any] = {"dtype": dtype, "scale": vector.kwargs.get("scale")}
        if causal:
            options["is_causal"] = True
        if not one_head_size:
            return run(q, k, v, mask, **options).reshape(vector.out.shape), notes
        H, E, Ev = q.shape[1], q.shape[-1], v.shape[-1]
        if k.shape[1] != H:
            notes.append(f"key/value heads repeated {H // k.shape[1]} times (GQA)")
            k, v = np.repeat(k, H // k.shape[1], axis=1), np.repeat(v, H // k.shape[1], axis=1)
        if options.pop("scale") is not None:
            q = q * (vector.kwargs["scale"] * np.sqrt(E))
            notes.append("scale folded into the query (it scales by 1/sqrt(E))")
        v, chunks = value_like_key(v, E, notes)
        outs = [run(q, k, v[..., c * E : (c + 1) * E], mask, **options) for c in range(chunks)]
        return np.concatenate(outs, axis=-1)[..., :Ev].reshape(vector.out.shape), notes

    return runner


def time_first(run: Callable[..., Any]) -> Runner:
    """A runner for a jax.nn-style (B, T, N, H) function whose value is shaped like key."""

    def runner(vector: GoldenVector, dtype: str) -> tuple[Any, list[str]]:
        L, S = vector.query.shape[-2], vector.key.shape[-2]
        mask, causal, note = combined_mask(vector, top_left_ok=L == S)
        q, k, v, mask = bhle(vector, mask)
        notes = [note] if note else []
        q, k, v = (np.swapaxes(x, 1, 2) for x in (q, k, v))  # (B, T, N, H)
        E, Ev = q.shape[-1], v.shape[-1]
        options: dict[str, Any] = {"scale": vector.kwargs.get("scale"), "is_causal": causal}
        if mask is not None:
            options["mask" if mask.dtype == bool else "bias"] = mask
        v, chunks = value_like_key(v, E, notes)
        outs = [
            run(q, k, v[..., c * E : (c + 1) * E], dtype=dtype, **options) for c in range(chunks)
        ]
        out = np.concatenate(outs, axis=-1)[..., :Ev]  # (B, T, N, Ev)
        return np.swapaxes(out, 1, 2).reshape(vector.out.shape), notes

    return runner
