"""Functional multi-head attention on the backend under test, against a NumPy float64 MHA.

The reference below is written independently of ``src/``: projections with NumPy, RoPE
through complex rotations, masks assembled by hand, attention from the float64 oracle
(``oracle.attention``). Every backend must give the same numbers; decoding token by
token with the kv cache must equal full causal attention (under ``jax.jit`` too).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from harness import Backend

import attnkit as ak
from attnkit.testing import oracle as ref
from attnkit.testing.tolerances import assert_close

RTOL = {"float64": 1e-10, "float32": 1e-5}


@dataclass(frozen=True)
class MHACase:
    name: str
    B: int = 2
    L: int = 11
    S: int | None = None  # None: self-attention (key = value = query)
    D: int = 24
    Hq: int = 4
    Hkv: int = 4
    kdim: int | None = None
    vdim: int | None = None
    bias: bool = True
    bias_kv: bool = False
    zero_attn: bool = False
    rope: ak.Rope | None = None
    padding: tuple[int, ...] | None = None  # valid keys per batch row
    attn_mask: str | None = None  # "bool" or "float", (L, S)
    kwargs: dict[str, Any] = field(default_factory=dict)


CASES = [
    MHACase(
        "self_gqa_rope_causal_padding",
        Hkv=2,
        rope=ak.Rope(),
        padding=(11, 8),
        kwargs={"is_causal": True},
    ),
    MHACase(
        "cross_kdim_vdim_bias_kv_zero_attn",
        L=7,
        S=9,
        D=16,
        Hq=2,
        Hkv=2,
        kdim=10,
        vdim=6,
        bias_kv=True,
        zero_attn=True,
        attn_mask="float",
    ),
    MHACase(
        "mqa_interleaved_partial_rope_window",
        Hkv=1,
        bias=False,
        rope=ak.Rope(base=500.0, interleaved=True, rotary_dim=4),
        kwargs={"window": (3, 0)},
    ),
    MHACase(
        "cross_bool_mask_weights_per_head",
        L=5,
        S=13,
        attn_mask="bool",
        padding=(13, 6),
        kwargs={"need_weights": True, "average_weights": False},
    ),
]


def _params(case: MHACase, rng: np.random.Generator) -> dict[str, np.ndarray | None]:
    E = case.D // case.Hq
    kdim, vdim = case.kdim or case.D, case.vdim or case.D
    n = rng.standard_normal
    p = {
        "q_weight": n((case.Hq * E, case.D)) / np.sqrt(case.D),
        "k_weight": n((case.Hkv * E, kdim)) / np.sqrt(kdim),
        "v_weight": n((case.Hkv * E, vdim)) / np.sqrt(vdim),
        "out_weight": n((case.D, case.Hq * E)) / np.sqrt(case.D),
    }
    for name, size in (
        ("q_bias", case.Hq * E),
        ("k_bias", case.Hkv * E),
        ("v_bias", case.Hkv * E),
        ("out_bias", case.D),
    ):
        p[name] = n(size) if case.bias else None
    for name in ("bias_k", "bias_v"):
        p[name] = n(case.Hkv * E) if case.bias_kv else None
    return p


def _rope_ref(x: np.ndarray, rope: ak.Rope) -> np.ndarray:
    """RoPE as a complex rotation: pairs (2f, 2f+1) interleaved or (f, f+R/2) half-split."""
    R = rope.rotary_dim or x.shape[-1]
    pos = np.arange(x.shape[-2])[:, None]
    theta = pos * rope.base ** (-np.arange(0, R, 2) / R)  # (L, R/2)
    xr = x[..., :R]
    if rope.interleaved:
        z = (xr[..., 0::2] + 1j * xr[..., 1::2]) * np.exp(1j * theta)
        rot = np.stack([z.real, z.imag], axis=-1).reshape(xr.shape)
    else:
        z = (xr[..., : R // 2] + 1j * xr[..., R // 2 :]) * np.exp(1j * theta)
        rot = np.concatenate([z.real, z.imag], axis=-1)
    return np.concatenate([rot, x[..., R:]], axis=-1)


def _heads(x: np.ndarray, h: int) -> np.ndarray:
    B, N, HD = x.shape
    return x.reshape(B, N, h, HD // h).transpose(0, 2, 1, 3)  # (B, h, N, d)


def _reference(case: MHACase, xq, xk, xv, p, kpm, am) -> tuple[np.ndarray, np.ndarray | None]:
    def lin(x, w, b):
        return x @ p[w].T + (0 if p[b] is None else p[b])

    q = _heads(lin(xq, "q_weight", "q_bias"), case.Hq)
    k = _heads(lin(xk, "k_weight", "k_bias"), case.Hkv)
    v = _heads(lin(xv, "v_weight", "v_bias"), case.Hkv)
    if case.rope is not None:
        q, k = _rope_ref(q, case.rope), _rope_ref(k, case.rope)
    B, S = xq.shape[0], k.shape[-2]
    extra_k, extra_v = [], []
    if case.bias_kv:
        extra_k.append(
            np.broadcast_to(p["bias_k"].reshape(case.Hkv, 1, -1), (B, case.Hkv, 1, k.shape[-1]))
        )
        extra_v.append(
            np.broadcast_to(p["bias_v"].reshape(case.Hkv, 1, -1), (B, case.Hkv, 1, v.shape[-1]))
        )
    if case.zero_attn:
        extra_k.append(np.zeros((B, case.Hkv, 1, k.shape[-1])))
        extra_v.append(np.zeros((B, case.Hkv, 1, v.shape[-1])))
    k, v = np.concatenate([k, *extra_k], -2), np.concatenate([v, *extra_v], -2)
    n_extra = len(extra_k)
    add = np.zeros((B, 1, xq.shape[1], S + n_extra))
    if kpm is not None:
        add[:, :, :, :S] += np.where(kpm, 0.0, -np.inf)[:, None, None, :]
    if am is not None:
        add[..., :S] += np.where(am, 0.0, -np.inf) if am.dtype == bool else am
    kw = {k_: v_ for k_, v_ in case.kwargs.items() if k_ in ("is_causal", "window")}
    res = ref.attention(q, k, v, attn_mask=add, enable_gqa=case.Hq != case.Hkv, **kw)
    o = res.out.transpose(0, 2, 1, 3).reshape(B, xq.shape[1], -1)  # (B, L, Hq*E)
    out = o @ p["out_weight"].T + (0 if p["out_bias"] is None else p["out_bias"])
    w = res.weights
    if case.kwargs.get("need_weights") and case.kwargs.get("average_weights", True):
        w = w.mean(axis=1)
    return out, w


def _draw(case: MHACase):
    rng = np.random.default_rng(zlib.crc32(case.name.encode()))
    S = case.S or case.L
    xq = rng.standard_normal((case.B, case.L, case.D))
    xk = xq if case.S is None else rng.standard_normal((case.B, S, case.kdim or case.D))
    xv = xq if case.S is None else rng.standard_normal((case.B, S, case.vdim or case.D))
    p = _params(case, rng)
    kpm = None if case.padding is None else np.arange(S)[None, :] < np.array(case.padding)[:, None]
    am = None
    if case.attn_mask == "bool":
        am = rng.random((case.L, S)) < 0.7
        am[:, 0] = True  # every row keeps a key, so no row is empty
    elif case.attn_mask == "float":
        am = rng.standard_normal((case.L, S))
    return xq, xk, xv, p, kpm, am


def _to_params(backend: Backend, p: dict, dtype: str) -> ak.MultiHeadParams:
    return ak.MultiHeadParams(
        **{k: None if v is None else backend.asarray(v, dtype) for k, v in p.items()}
    )


def _call(backend: Backend, fn, params, *arrays, **kwargs):
    """``fn(*arrays, params=..., **kwargs)``; under ``--jit`` the arrays and params are traced."""
    if backend.name == "jax" and backend.jit:
        return backend.jax.jit(lambda p, *a: fn(*a, params=p, **kwargs))(params, *arrays)
    return fn(*arrays, params=params, **kwargs)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_multi_head_equals_reference(case: MHACase, dtype: str, backend: Backend) -> None:
    xq, xk, xv, p, kpm, am = _draw(case)
    gold, gold_w = _reference(case, xq, xk, xv, p, kpm, am)
    params = _to_params(backend, p, dtype)
    q = backend.asarray(xq, dtype)
    k = None if case.S is None else backend.asarray(xk, dtype)
    v = None if case.S is None else backend.asarray(xv, dtype)
    kwargs = dict(case.kwargs)
    if kpm is not None:
        kwargs["key_padding_mask"] = backend.asarray(kpm, "bool")
    if am is not None:
        kwargs["attn_mask"] = backend.asarray(am, "bool" if am.dtype == bool else dtype)
    arrays = [q] + ([k, v] if k is not None else [])
    res = _call(
        backend,
        ak.multi_head_attention,
        params,
        *arrays,
        num_heads=case.Hq,
        num_kv_heads=case.Hkv,
        add_zero_attn=case.zero_attn,
        rope=case.rope,
        **kwargs,
    )
    ctx = f"case {case.name}, backend {backend.name}, {dtype}"
    scale = max(1.0, float(np.abs(gold).max()))
    assert_close("output", backend.to_numpy(res.output), gold, RTOL[dtype] * scale, ctx)
    if case.kwargs.get("need_weights"):
        assert_close("weights", backend.to_numpy(res.weights), gold_w, RTOL[dtype], ctx)


def test_decoding_with_cache_equals_full_causal(backend: Backend) -> None:
    """Prefill 4 positions, then decode one at a time: equals one causal call over all."""
    case = MHACase("decode", L=9, Hkv=2, rope=ak.Rope(), kwargs={"is_causal": True})
    xq, _, _, p, _, _ = _draw(case)
    gold, _ = _reference(case, xq, xq, xq, p, None, None)
    params = _to_params(backend, p, "float64")
    x = backend.asarray(xq, "float64")
    opts = {"num_heads": case.Hq, "num_kv_heads": case.Hkv, "rope": case.rope, "is_causal": True}
    cache = ak.init_kv_cache((case.B,), case.Hkv, 12, case.D // case.Hq, like=params.k_weight)

    def step(params, x, cache):
        return ak.multi_head_attention(x, params=params, cache=cache, **opts)

    if backend.name == "jax" and backend.jit:
        step = backend.jax.jit(step)
    outs, start = [], 0
    for stop in (4, 5, 6, 7, 8, 9):
        res = step(params, x[:, start:stop, :], cache)
        cache, start = res.cache, stop
        outs.append(backend.to_numpy(res.output))
    assert int(cache.length) == case.L
    got = np.concatenate(outs, axis=1)
    scale = max(1.0, float(np.abs(gold).max()))
    assert_close(
        "decoded output",
        got,
        gold,
        RTOL["float64"] * scale,
        f"backend {backend.name}, decode with cache",
    )
