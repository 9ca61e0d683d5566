"""Golden vectors in a framework's layout, for ``attnkit verify``: the causal and window
rules as explicit masks where a framework has no such option, every vector as
(B, H, L, E), and values padded to the key's head size where a framework needs Ev == E
(exact: attention is linear in the value). Each adaptation is said in a note."""

from __future__ import annotations

from typing import Any

import numpy as np

from .verify import Vector

__all__ = ["bhle", "combined_mask", "structure", "value_like_key"]


def structure(vector: Vector) -> np.ndarray | None:
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


def combined_mask(vector: Vector, top_left_ok: bool) -> tuple[Any, bool, str]:
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


def bhle(vector: Vector, mask: Any) -> tuple[np.ndarray, ...]:
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


def value_like_key(v: np.ndarray, E: int, notes: list[str]) -> tuple[np.ndarray, int]:
    """value (..., Ev) zero-padded to a multiple of E columns (exact: attention is linear
    in the value), and how many chunks of E it is."""
    Ev = v.shape[-1]
    chunks = max(1, -(-Ev // E)) if E else 1
    if Ev != E and E:
        pieces = f"zero-padded to E={E}" if Ev < E else f"run as {chunks} chunks of E={E}"
        notes.append(f"value Ev={Ev} {pieces} columns (it needs Ev == E)")
        v = np.concatenate([v, np.zeros((*v.shape[:-1], chunks * E - Ev))], axis=-1)
    return v, chunks
