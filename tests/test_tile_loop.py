"""Every call form as one loop over its tile table (attnkit.blocked.table, .tile_loop).

The forms a training step passes (causal with a key-padding mask, ALiBi, soft-capping,
packed documents by static lengths and by traced segment ids, bottom-right prefill with
S > L, weights, dropout, GQA, windows, dense), each:

- under ``jax.jit`` lowers to a program whose size does not depend on L: StableHLO lines
  at L = 1024 and 16384 within 1.2x, forward and forward+backward (lowering only: no
  compile, a fraction of a second each);
- gives the plain formula's output and gradients (torch autograd of the float64 formula,
  rows with no key 0) at a length of several tiles, float64, 1e-10;
- skips the tiles its mask's data leaves dead: dropped before the loop where the data
  is concrete (NumPy's row blocks too), a live flag per tile where traced.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from _helpers import x64

import attnkit as ak
from attnkit import masks, score_mods
from attnkit.blocked.operands import prepare_operands
from attnkit.blocked.table import build_table
from attnkit.blocked.tile_loop import TileList
from attnkit.call_checks import validate
from attnkit.options import Options

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")
jnp = jax.numpy

B, H, E = 2, 4, 16
LENGTHS = (1024, 16384)
#: StableHLO lines at the longer length over the shorter, at most (issue 37, item 3).
GROWTH = 1.2


def _form(name: str, L: int) -> tuple[Any, tuple[Any, ...], int]:
    """(fn(q, k, v, *extra), extra arrays, S) of a call form at query length L."""
    S = 4 * L if name == "prefill" else L
    extra: tuple[Any, ...] = ()
    if name == "padding":
        lens = np.array([S, 3 * S // 4])
        extra = (jnp.asarray(np.arange(S)[None, :] < lens[:, None])[:, None, None, :],)
        return (lambda q, k, v, m: ak.scaled_dot_product_attention(
            q, k, v, attn_mask=m, is_causal=True)), extra, S  # fmt: skip
    if name == "segments":
        ids = jnp.asarray(np.repeat(np.arange(4), L // 4)[None].repeat(B, 0), jnp.int32)
        return (lambda q, k, v, ids: ak.scaled_dot_product_attention(
            q, k, v, attn_mask=masks.segments(ids, ids), is_causal=True)), (ids,), S  # fmt: skip
    kw = {
        "causal": {"is_causal": True},
        "dense": {},
        "window": {"window": (256, 0)},
        "alibi": {"is_causal": True, "score_mod": score_mods.alibi(H)},
        "softcap": {"is_causal": True, "score_mod": score_mods.softcap(50.0)},
        "documents": {"attn_mask": masks.documents([L // 4] * 4) & masks.causal()},
        "prefill": {"is_causal": True, "causal_alignment": "bottom_right"},
        "weights": {"is_causal": True, "return_weights": True},
        "lse": {"is_causal": True, "return_lse": True},
        "dropout": {"is_causal": True, "dropout_p": 0.1, "rng": jax.random.key(0)},
        "gqa": {"is_causal": True, "enable_gqa": True},
    }[name]
    return (lambda q, k, v: ak.scaled_dot_product_attention(q, k, v, **kw)), extra, S


FORMS = ("padding", "alibi", "softcap", "documents", "segments", "prefill", "weights",
         "dropout", "lse", "gqa", "causal", "window", "dense")  # fmt: skip


def _lines(name: str, L: int, grad: bool) -> int:
    fn, extra, S = _form(name, L)
    heads_kv = H // 2 if name == "gqa" else H
    q = jax.ShapeDtypeStruct((B, H, L, E), jnp.float32)
    kv = jax.ShapeDtypeStruct((B, heads_kv, S, E), jnp.float32)
    if grad:
        call = fn

        def fn(q, k, v, *rest):
            out = call(q, k, v, *rest)
            return jnp.sum(out[0] if isinstance(out, tuple) else out)

        fn = jax.grad(fn, argnums=(0, 1, 2))
    return len(jax.jit(fn).lower(q, kv, kv, *extra).as_text().splitlines())


@pytest.mark.parametrize("grad", [False, True], ids=["forward", "forward+backward"])
@pytest.mark.parametrize("name", FORMS)
def test_program_does_not_grow_with_length(name: str, grad: bool) -> None:
    small, large = (_lines(name, L, grad) for L in LENGTHS)
    print(f"{name} {'fwd+bwd' if grad else 'forward'}: {small} -> {large} StableHLO lines")
    assert large <= GROWTH * small, (
        f"{name}: the program grew from {small} lines at L={LENGTHS[0]} to {large} at "
        f"L={LENGTHS[1]} (allowed {GROWTH}x)"
    )


# --- the forms' values: the plain formula, float64 ---------------------------------------


def _gold(q, k, v, d_out, allowed, bias=None):
    """torch autograd of the float64 formula (GQA by repeating heads in the oracle)."""
    t = [torch.tensor(x, requires_grad=True) for x in (q, k, v)]
    kk, vv = t[1], t[2]
    if kk.shape[-3] != t[0].shape[-3]:
        rep = t[0].shape[-3] // kk.shape[-3]
        kk, vv = kk.repeat_interleave(rep, dim=-3), vv.repeat_interleave(rep, dim=-3)
    s = (t[0] @ kk.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if bias is not None:
        s = s + torch.tensor(bias)
    s = s.masked_fill(~torch.tensor(allowed), -math.inf)
    live = torch.isfinite(s).any(-1, keepdim=True)
    w = torch.softmax(torch.where(live, s, torch.zeros_like(s)), dim=-1) * live
    out = w @ vv
    out.backward(torch.tensor(d_out))
    return out.detach().numpy(), [x.grad.numpy() for x in t]


def _positions(L: int, S: int, shift: int = 0) -> tuple[np.ndarray, np.ndarray]:
    return np.arange(L)[:, None] + shift, np.arange(S)[None, :]


VALUE_L = 300  # several tiles of 64 (block_size), a ragged last one


def _values_case(name: str) -> tuple[dict[str, Any], int, np.ndarray, Any, tuple[Any, ...]]:
    """(kwargs, S, allowed (B|1, H|1, L, S), bias or None, traced extras)."""
    L = VALUE_L
    rng = np.random.default_rng(3)
    if name == "padding":
        lens = np.array([L, 170])
        pad = np.arange(L)[None, :] < lens[:, None]  # (B, S)
        qi, kj = _positions(L, L)
        allowed = (kj <= qi)[None, None] & pad[:, None, None, :]
        return {"is_causal": True}, L, allowed, None, (pad[:, None, None, :],)
    if name == "segments":
        ids = np.sort(rng.integers(0, 3, size=(B, L)), axis=-1)
        ids[1] = 7  # batch 1: one document
        qi, kj = _positions(L, L)
        allowed = (ids[:, None, :, None] == ids[:, None, None, :]) & (kj <= qi)[None, None]
        return {"is_causal": True}, L, allowed, None, (ids,)
    if name == "documents":
        qi, kj = _positions(L, L)
        doc = np.repeat(np.arange(3), [100, 130, 70])
        allowed = (doc[:, None] == doc[None, :]) & (kj <= qi)
        mask = masks.documents([100, 130, 70]) & masks.causal()
        return {"attn_mask": mask}, L, allowed[None, None], None, ()
    if name == "alibi":
        qi, kj = _positions(L, L)
        slopes = np.asarray(score_mods.alibi_slopes(H))[:, None, None]
        bias = slopes * (kj - qi)[None]
        kw = {"is_causal": True, "score_mod": score_mods.alibi(H)}
        return kw, L, (kj <= qi)[None, None], bias[None], ()
    if name == "prefill":
        S = 4 * L
        qi, kj = _positions(L, S, shift=S - L)
        kw = {"is_causal": True, "causal_alignment": "bottom_right"}
        return kw, S, (kj <= qi)[None, None], None, ()
    if name == "window past the keys":  # rows whose windows lie past the keys
        S = 120
        qi, kj = _positions(L, S)
        allowed = (kj + 37 >= qi - 64) & (kj + 37 <= qi)
        return {"window": (64, 0), "kv_offset": 37}, S, allowed[None, None], None, ()
    raise ValueError(name)


VALUE_FORMS = ("padding", "segments", "documents", "alibi", "prefill", "window past the keys")


@pytest.mark.parametrize("name", VALUE_FORMS)
def test_forms_equal_the_plain_formula(name: str) -> None:
    kw, S, allowed, bias, extra = _values_case(name)
    rng = np.random.default_rng(5)
    L = VALUE_L
    q, k, v = (rng.standard_normal(s) for s in ((B, H, L, E), (B, H, S, E), (B, H, S, E)))
    d_out = rng.standard_normal((B, H, L, E))
    gold, grads = _gold(q, k, v, d_out, np.broadcast_to(allowed, (B, H, L, S)), bias)
    with x64(jax):

        def loss(a, b, c, *rest):
            extra_kw = dict(kw, block_size=64)
            if name == "padding":
                extra_kw["attn_mask"] = rest[0]
            if name == "segments":
                extra_kw["attn_mask"] = masks.segments(rest[0], rest[0])
            out = ak.scaled_dot_product_attention(a, b, c, **extra_kw)
            return jnp.sum(out * d_out), out

        fn = jax.jit(jax.grad(loss, argnums=(0, 1, 2), has_aux=True))
        (dq, dk, dv), out = fn(*(jnp.asarray(x) for x in (q, k, v, *extra)))
    for what, got, want in zip(("out", "dq", "dk", "dv"), (out, dq, dk, dv), (gold, *grads),
                               strict=True):  # fmt: skip
        err = float(np.max(np.abs(np.asarray(got) - want)))
        assert err <= 1e-10, f"{name}: {what} max error {err:.3e} > allowed 1e-10"


# --- dead tiles: skipped where the data says so -------------------------------------------


def _segments_problem(xp_ids: Any, L: int) -> Any:
    ids = xp_ids
    x = jnp.zeros((1, 1, L, 8)) if hasattr(ids, "devices") else np.zeros((1, 1, L, 8))
    return validate(x, x, x, Options(attn_mask=masks.segments(ids, ids), is_causal=True))


def test_segments_tiles_are_dropped_or_flagged() -> None:
    """Two documents of 256 in tiles of 128: causal has 10 tiles, 4 of them attend across
    documents. Concrete ids: those 4 never enter the loop; traced ids: all 10 enter with
    a kind each, the 4 dead ones 0 (skipped by jax.lax.cond)."""
    L = 512
    ids = np.repeat(np.arange(2), 256)
    p = _segments_problem(jnp.asarray(ids), L)
    table = build_table(p, 128, 128, padded=True)
    assert table.tiles == 10 and table.dynamic, table
    concrete = TileList(p, prepare_operands(p, None), table)
    assert len(concrete.tiles) == 6 and concrete.traced_kinds is None, concrete.tiles
    assert all((i < 2) == (j < 2) for i, j in concrete.tiles), concrete.tiles

    def kinds(ids: Any) -> Any:
        q = validate(*(jnp.zeros((1, 1, L, 8)),) * 3,
                     Options(attn_mask=masks.segments(ids, ids), is_causal=True))  # fmt: skip
        listed = TileList(q, prepare_operands(q, None), build_table(q, 128, 128, padded=True))
        return listed.traced_kinds

    got = np.asarray(jax.jit(kinds)(jnp.asarray(ids)))
    assert got.shape == (10,) and int((got == 0).sum()) == 4, got


def test_numpy_row_blocks_skip_other_documents() -> None:
    """NumPy runs query blocks in Python; with segment ids as an array each block reads
    only the key blocks of its own documents (explain counts the columns), and the
    result equals the reference formula."""
    L = 1024
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 2, L, 16)) for _ in range(3))
    ids = np.repeat(np.arange(4), L // 4)
    kw = {"attn_mask": masks.segments(ids, ids), "is_causal": True, "block_size": 128}
    plan = ak.explain(q, k, v, **kw)
    assert plan.strategy == "row blocks" and "data decides" in str(plan), plan
    dense_columns = sum(min(L, a + 128) for a in range(0, L, 128))  # causal alone
    assert plan.key_columns <= 0.4 * dense_columns, (plan.key_columns, dense_columns)
    got = ak.scaled_dot_product_attention(q, k, v, **kw)
    want = ak.scaled_dot_product_attention(q, k, v, **{**kw, "impl": "reference"})
    err = float(np.max(np.abs(got - want)))
    assert err <= 1e-12, f"numpy segments: max error {err:.3e} > 1e-12"


# --- eager JAX: one compiled program per signature ----------------------------------------


def test_eager_jax_runs_one_program_per_signature() -> None:
    from attnkit import compiled

    rng = np.random.default_rng(1)
    q, k, v = (jnp.asarray(rng.standard_normal((1, 2, 200, 8)), jnp.float32) for _ in range(3))
    compiled._PROGRAMS.clear()
    first = ak.scaled_dot_product_attention(q, k, v, is_causal=True, score_mod=score_mods.alibi(2))
    again = ak.scaled_dot_product_attention(q, k, v, is_causal=True, score_mod=score_mods.alibi(2))
    assert len(compiled._PROGRAMS) == 1, "a second alibi(2) call must reuse the program"
    assert np.array_equal(np.asarray(first), np.asarray(again))
    jitted = jax.jit(lambda a, b, c: ak.scaled_dot_product_attention(
        a, b, c, is_causal=True, score_mod=score_mods.alibi(2)))(q, k, v)  # fmt: skip
    assert np.allclose(np.asarray(first), np.asarray(jitted), atol=1e-6)
    bias = jnp.asarray(0.5)
    ak.scaled_dot_product_attention(q, k, v, score_mod=lambda s, i, j, h: s + bias)
    assert len(compiled._PROGRAMS) == 1, "a general callable runs as it is, uncompiled"
