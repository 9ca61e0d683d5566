"""``attnkit verify``, second half: the golden vectors through the frameworks' own attention.

PyTorch's ``F.scaled_dot_product_attention`` (float64) and ``jax.nn.dot_product_attention``
(float32: it computes float64 at float32 precision) run the same vectors as attnkit. What a
framework cannot take as it is, is adapted and said so (a bottom-right causal rule or a
window given as an explicit bool mask; jax.nn's value, which must be shaped like the key,
zero-padded and run in chunks of E columns, which attention's linearity in the value makes
exact); every place where the framework then differs from the float64 oracle is reported
with what it gives there (rows with nothing to attend: the mean of the values, say).

The vectors are adapted here, in NumPy; the frameworks themselves are called through
their backends (``attnkit.backends.torch.peers.sdpa``,
``attnkit.backends.jax.peers.dot_product_attention``), NumPy arrays in and out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .verify import FrameworkResult, Vector, _error, allowed_error

__all__ = ["check_frameworks"]


def _structure(vector: Vector) -> np.ndarray | None:
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


def _combined_mask(vector: Vector, top_left_ok: bool) -> tuple[Any, bool, str]:
    """(mask for the framework, is_causal, note): structure as an explicit mask if needed."""
    kw, user = vector.kwargs, vector.attn_mask
    structure = _structure(vector)
    if structure is None:
        return user, False, ""
    simple = kw.get("causal_alignment", "top_left") == "top_left" and "window" not in kw
    if simple and top_left_ok and user is None and not kw.get("q_offset", 0):
        return None, True, ""
    rules = []
    if kw.get("is_causal"):
        alignment = kw.get("causal_alignment", "top_left")
        rules.append(f"causal {alignment}")
    if "window" in kw:
        rules.append(f"window={kw['window']}")
    if kw.get("q_offset") or kw.get("kv_offset"):
        rules.append("position offsets")
    note = f"{' and '.join(rules)} as an explicit bool mask"
    if kw.get("is_causal") and kw.get("causal_alignment", "top_left") != "top_left":
        note += " (is_causal is top-left only)"
    if user is None:
        return structure, False, note
    if user.dtype == bool:
        return user & structure, False, note
    return np.where(structure, user, -np.inf), False, note


def _describe_difference(vector: Vector, theirs: np.ndarray, allowed: float) -> str:
    """Where ``theirs`` differs from the oracle's output, in words."""
    rows_bad = np.any(np.abs(np.nan_to_num(theirs, nan=np.inf) - vector.out) > allowed, -1)
    empty = np.broadcast_to(vector.empty_rows, rows_bad.shape)
    if rows_bad.any() and not (rows_bad & ~empty).any():
        v = np.broadcast_to(vector.value, (*rows_bad.shape[:-1], *vector.value.shape[-2:]))
        mean = v.mean(axis=-2, keepdims=True)  # (..., 1, Ev)
        bad = theirs[rows_bad]
        if np.isnan(bad).all():
            what = "NaN"
        elif np.allclose(np.broadcast_to(mean, theirs.shape)[rows_bad], bad, atol=1e-5):
            what = "the mean of the values (uniform weights)"
        else:
            what = "nonzero values"
        return f"{int(rows_bad.sum())} rows with no key to attend: it gives {what}, the oracle 0"
    return f"differs on {int(rows_bad.sum())} of {rows_bad.size} rows"


def _verdict(
    framework: str, vector: Vector, theirs: np.ndarray, dtype: str, note: str
) -> FrameworkResult:
    allowed = 2 * allowed_error(dtype, vector, vector.out)
    error = _error(theirs, vector.out)
    if error <= allowed:
        return FrameworkResult(framework, vector.name, error, True, "", note)
    diff = _describe_difference(vector, theirs, allowed)
    finite = bool(np.isfinite(error))
    return FrameworkResult(framework, vector.name, error if finite else None, False, diff, note)


def _torch_sdpa(vector: Vector) -> FrameworkResult:
    from attnkit.backends.torch import peers

    mask, causal, note = _combined_mask(vector, top_left_ok=True)
    kw = {k: vector.kwargs[k] for k in ("scale", "enable_gqa") if k in vector.kwargs}
    out = peers.sdpa(vector.query, vector.key, vector.value, mask, is_causal=causal, **kw)
    return _verdict("torch SDPA", vector, out, "float64", note)


def _to_bthd(x: np.ndarray, lead: tuple[int, ...]) -> np.ndarray:
    """(..., N, T, H) or (T, H) / (B, T, H) to jax.nn's (B, T, N, H)."""
    if x.ndim == 2:
        return x[None, :, None, :]
    if x.ndim == 3:
        return np.broadcast_to(x, (*lead, *x.shape[-2:]))[:, :, None, :]
    batch = int(np.prod(lead))
    x = np.broadcast_to(x, (*lead, *x.shape[-3:])).reshape(batch, *x.shape[-3:])
    return np.swapaxes(x, 1, 2)


def _jax_nn(vector: Vector) -> FrameworkResult:
    from attnkit.backends.jax import peers

    q, k, v = vector.query, vector.key, vector.value
    lead_rank = 1 if q.ndim == 3 else max(q.ndim - 3, 0)
    lead = np.broadcast_shapes(*(x.shape[:lead_rank] for x in (q, k, v))) if q.ndim > 2 else ()
    mask, causal, note = _combined_mask(vector, top_left_ok=q.shape[-2] == k.shape[-2])
    notes = [note] if note else []
    qb, kb, vb = (_to_bthd(x, lead) for x in (q, k, v))  # (B, T, N, H)
    B, L, _, E = qb.shape  # (B, L, Hq, E)
    S, Ev = kb.shape[1], vb.shape[-1]
    extra: dict[str, Any] = {"scale": vector.kwargs.get("scale"), "is_causal": causal}
    if mask is not None:
        m = np.broadcast_to(mask, (*vector.out.shape[:-1], S))  # (..., [Hq,] L, S)
        m = m.reshape(B, -1, L, S)  # (B, N or 1, L, S)
        extra["mask" if m.dtype == bool else "bias"] = m
    chunks = -(-Ev // E)  # jax.nn needs value shaped like key: value columns in chunks of E
    if Ev != E:
        pieces = f"zero-padded to E={E}" if Ev < E else f"run as {chunks} chunks of E={E}"
        notes.append(f"value Ev={Ev} {pieces} columns (jax.nn needs Ev == E)")
        vb = np.concatenate([vb, np.zeros((*vb.shape[:-1], chunks * E - Ev))], axis=-1)
    outs = [
        peers.dot_product_attention(qb, kb, vb[..., c * E : (c + 1) * E], **extra)
        for c in range(chunks)
    ]  # each (B, L, Hq, E), float64 from float32
    out = np.concatenate(outs, axis=-1)[..., :Ev]
    out = np.swapaxes(out, 1, 2) if q.ndim >= 4 else out[:, :, 0]  # (B, Hq, L, Ev) / (B, L, Ev)
    out = out.reshape(vector.out.shape)
    return _verdict("jax.nn", vector, out, "float32", "; ".join(notes))


def check_frameworks(
    vectors: list[Vector], names: tuple[str, ...], step: Callable[[str], None] | None = None
) -> list[FrameworkResult]:
    """Run every vector through torch SDPA (``"torch"`` in names) and jax.nn (``"jax"``)."""
    runners = [(n, f) for n, f in (("torch", _torch_sdpa), ("jax", _jax_nn)) if n in names]
    results = []
    for backend, run in runners:
        label = "torch SDPA" if backend == "torch" else "jax.nn"
        for vector in vectors:
            if step is not None:
                step(f"{label} {vector.name}")
            try:
                results.append(run(vector))
            except Exception as exc:  # a framework refusing the input is a finding
                message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                results.append(
                    FrameworkResult(
                        label,
                        vector.name,
                        None,
                        False,
                        f"refused: {type(exc).__name__}: {message[:120]}",
                        "",
                    )
                )
    return results
