"""The call forms of ``attnkit bench --forms`` on JAX: attnkit and its peers, compiled.

Forms, batch 1, 8 heads of 64, float32, (B, H, L, E) arrays (the peers' (B, T, N, H)
layout is transposed once, outside the timing)::

    padded causal    causal, the last quarter of the keys padding: attnkit with a
                     key-padding bool mask (B, 1, 1, S); jax.nn and tokamax with
                     key_value_seq_lengths
    alibi causal     causal with score_mods.alibi(8)
    segments causal  causal with masks.segments(ids, ids), 4 documents, ids traced
    softcap causal   causal with score_mods.softcap(50); tokamax's logits_soft_cap
    dense            unstructured

Peers: ``jax.nn.dot_product_attention`` and tokamax's ``xla_chunked`` implementation
(where tokamax is installed), both under ``jax.jit``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["JAX_NN", "TOKAMAX", "compile_seconds", "forward_seconds", "peers_of", "setup"]

JAX_NN = "jax.nn.dot_product_attention"
TOKAMAX = "tokamax xla_chunked"
HEADS, DIM = 8, 64


def peers_of(form: str) -> tuple[str, ...]:
    """The peers that compute ``form``."""
    return {
        "padded causal": (JAX_NN, TOKAMAX),
        "softcap causal": (TOKAMAX,),
        "dense": (JAX_NN,),
    }.get(form, ())


def setup(form: str, L: int, impl: str, seed: int = 0) -> tuple[Callable[..., Any], tuple]:
    """(fn, args): ``fn(*args)`` computes ``form`` at length L by ``impl`` ("attnkit" or a
    peer's name), returning (B, H, L, E)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import attnkit as ak
    from attnkit import masks, score_mods

    rng = np.random.default_rng(seed)
    q, k, v = (jnp.asarray(rng.standard_normal((1, HEADS, L, DIM)), jnp.float32) for _ in "qkv")
    lengths = jnp.asarray([L - L // 4], jnp.int32)
    if impl == "attnkit":
        if form == "padded causal":
            pad = (jnp.arange(L)[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, S)
            return (lambda q, k, v, m: ak.scaled_dot_product_attention(
                q, k, v, attn_mask=m, is_causal=True)), (q, k, v, pad)  # fmt: skip
        if form == "segments causal":
            ids = jnp.asarray(np.repeat(np.arange(4), -(-L // 4))[None, :L], jnp.int32)

            def segments(q: Any, k: Any, v: Any, ids: Any) -> Any:
                mask = masks.segments(ids, ids)
                return ak.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=True)

            return segments, (q, k, v, ids)
        kw: dict[str, Any] = {
            "alibi causal": {"is_causal": True, "score_mod": score_mods.alibi(HEADS)},
            "softcap causal": {"is_causal": True, "score_mod": score_mods.softcap(50.0)},
            "dense": {},
        }[form]
        return (lambda q, k, v: ak.scaled_dot_product_attention(q, k, v, **kw)), (q, k, v)
    qt, kt, vt = (x.swapaxes(1, 2) for x in (q, k, v))  # (B, T, N, H)
    causal = form != "dense"
    extra: dict[str, Any] = {}
    if form == "padded causal":
        extra["key_value_seq_lengths"] = lengths
    if impl == JAX_NN:
        if form not in ("padded causal", "dense"):
            raise ValueError(f"jax.nn has no {form}")

        def jax_nn(q: Any, k: Any, v: Any) -> Any:
            out = jax.nn.dot_product_attention(q, k, v, is_causal=causal, **extra)
            return out.swapaxes(1, 2)

        return jax_nn, (qt, kt, vt)
    if impl == TOKAMAX:
        import tokamax

        if form == "softcap causal":
            extra["logits_soft_cap"] = 50.0
        elif form != "padded causal":
            raise ValueError(f"no tokamax baseline for {form}")

        def chunked(q: Any, k: Any, v: Any) -> Any:
            out = tokamax.dot_product_attention(
                q, k, v, is_causal=causal, implementation="xla_chunked", **extra
            )
            return out.swapaxes(1, 2)

        return chunked, (qt, kt, vt)
    raise ValueError(f"unknown implementation {impl!r}")


def compile_seconds(
    fn: Callable[..., Any], args: tuple, grad: bool, repeats: int = 3
) -> list[float]:
    """Seconds ``jax.jit`` takes to lower and compile ``fn`` (with ``grad``: the gradient
    of sum(fn)^2 with respect to q, k and v), ``repeats`` times from cleared caches
    (after one unrelated compile: JAX's own first-compile costs are not the call's)."""
    import jax
    import jax.numpy as jnp

    target = fn
    if grad:
        target = jax.grad(
            lambda q, k, v, *rest: jnp.sum(fn(q, k, v, *rest) ** 2), argnums=(0, 1, 2)
        )
    times = []
    for _ in range(repeats):
        jax.clear_caches()
        start = time.perf_counter()
        jax.jit(target).lower(*args).compile()
        times.append(time.perf_counter() - start)
    return times


def forward_seconds(fn: Callable[..., Any], args: tuple, repeats: int) -> list[float]:
    """Seconds of each of ``repeats`` calls of ``jax.jit(fn)`` after one warm-up call."""
    import jax

    compiled = jax.jit(fn)
    jax.block_until_ready(compiled(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - start)
    return times
