"""Ulysses sequence parallelism: two ``all_to_all``\\ s around the unchanged core.

The core runs on the whole sequence for a device's heads (every mask, window and offset
applies as on one device)::

    (..., Hq, L/P, E)  --all_to_all-->  (..., Hq/P, L, E)  --core-->  (..., Hq/P, L, Ev)
                                        --all_to_all-->  (..., Hq, L/P, Ev)

With GQA the group mapping holds on both sides. Gradients are JAX's own through
``all_to_all`` and the core's custom_vjp.
"""

from __future__ import annotations

from typing import Any

import attnkit as ak

from .zigzag import zigzag_shard, zigzag_unshard

__all__ = ["ulysses_body"]


def ulysses_body(
    q: Any, k: Any, v: Any, *, axis: str, parts: int, layout: str, core_kwargs: dict[str, Any]
) -> Any:
    """Per-device Ulysses: local q (..., Hq, L/P, E), k (..., Hkv, S/P, E), v (..., Hkv,
    S/P, Ev) -> local out (..., Hq, L/P, Ev). With ``layout="zigzag"`` the gathered
    sequence is put back in order before the core, and in zigzag order after it."""
    import jax

    def heads_to_rows(x: Any) -> Any:  # (..., H, n/P, F) -> (..., H/P, n, F)
        return jax.lax.all_to_all(x, axis, x.ndim - 3, x.ndim - 2, tiled=True)

    q, k, v = heads_to_rows(q), heads_to_rows(k), heads_to_rows(v)  # (..., H/P, n, F)
    if layout == "zigzag":
        q, k, v = (zigzag_unshard(x, parts) for x in (q, k, v))  # (..., H/P, n, F) in order
    out = ak.scaled_dot_product_attention(q, k, v, **core_kwargs)  # (..., Hq/P, L, Ev)
    if layout == "zigzag":
        out = zigzag_shard(out, parts)  # (..., Hq/P, L, Ev) in zigzag order
    return jax.lax.all_to_all(
        out, axis, out.ndim - 2, out.ndim - 3, tiled=True
    )  # (..., Hq, L/P, Ev)
