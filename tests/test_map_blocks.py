"""``Backend.map_blocks``: the loop over tiles, and the calls that run through it.

On JAX every call form runs as one loop over its tile table (``jax.lax.scan``), forward
and backward; NumPy, array-api-strict and torch run query blocks in a Python loop.
Checks: gradients and outputs of windows, dense and causal calls against float64 torch
autograd of the plain formula (float64: 1e-10 absolute, sums in another order; float32:
2e-5), the hook itself against slicing by hand (its tiles' positions passed to the
body, merged pieces in the online-softmax packing), the jitted program's size at two
lengths (the HLO test), and ``attnkit.explain`` naming the loop.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from _helpers import x64
from attnkit.backends import load

import attnkit as ak
from attnkit.blocked.loop import map_blocks
from attnkit.merge import finish_packed

torch = pytest.importorskip("torch")

L, E, Ev = 70, 6, 5
F64 = 1e-10


def _inputs(seed: int = 0) -> tuple[np.ndarray, ...]:
    """q (2, 4, L, E), k (2, 2, L, E), v (2, 2, L, Ev), d_out (2, 4, L, Ev): GQA, two groups."""
    rng = np.random.default_rng(seed)
    shapes = ((2, 4, L, E), (2, 2, L, E), (2, 2, L, Ev), (2, 4, L, Ev))
    return tuple(rng.standard_normal(s) for s in shapes)


def _gold(q, k, v, d_out, window: tuple[int, int] | None) -> tuple[np.ndarray, list[np.ndarray]]:
    """Output and (dq, dk, dv) of the plain formula, torch.autograd in float64 (``window``
    None: unstructured)."""
    t = [torch.tensor(x, requires_grad=True) for x in (q, k, v)]
    kk, vv = (x.repeat_interleave(2, dim=1) for x in t[1:])  # GQA by copying, in the oracle
    i = torch.arange(L)[:, None]
    j = torch.arange(L)[None, :]
    s = (t[0] @ kk.transpose(-1, -2)) / math.sqrt(E)
    if window is not None:
        s = s.masked_fill(~((j >= i - window[0]) & (j <= i + window[1])), -math.inf)
    out = torch.softmax(s, dim=-1) @ vv
    out.backward(torch.tensor(d_out))
    return out.detach().numpy(), [x.grad.numpy() for x in t]


WINDOWS = {"window (5, 3)": (5, 3), "causal window (7, 0)": (7, 0), "dense": None}
KW = {"block_size": 4, "enable_gqa": True}  # a run of about 16 blocks (17 dense), one more


def _check(name: str, got: list[Any], want: list[np.ndarray], tol: float) -> None:
    for what, g, w in zip(("out", "dq", "dk", "dv"), got, want, strict=True):
        err = float(np.max(np.abs(np.asarray(g, dtype=np.float64) - w)))
        assert err <= tol, f"{name}: {what} max error {err:.3e} > allowed {tol:.1e} (L={L}, {KW})"


@pytest.mark.parametrize("window", list(WINDOWS.values()), ids=list(WINDOWS))
def test_numpy_and_strict_runs(window: tuple[int, int]) -> None:
    q, k, v, d_out = _inputs()
    gold, grads = _gold(q, k, v, d_out, window)
    out, vjp = ak.attention_vjp(q, k, v, window=window, **KW)  # window None: unstructured
    _check("numpy attention_vjp", [out, *vjp(d_out)], [gold, *grads], F64)
    xp = pytest.importorskip("array_api_strict")
    out, vjp = ak.attention_vjp(*(xp.asarray(x) for x in (q, k, v)), window=window, **KW)
    got = [out, *vjp(xp.asarray(d_out))]
    _check("strict attention_vjp", [np.asarray(g) for g in got], [gold, *grads], F64)


@pytest.mark.parametrize("window", list(WINDOWS.values()), ids=list(WINDOWS))
def test_torch_generic_runs(window: tuple[int, int]) -> None:
    q, k, v, d_out = _inputs()
    gold, grads = _gold(q, k, v, d_out, window)
    t = [torch.tensor(x, requires_grad=True) for x in (q, k, v)]
    out = ak.scaled_dot_product_attention(*t, window=window, impl="generic", **KW)
    out.backward(torch.tensor(d_out))
    _check("torch generic", [out.detach(), *(x.grad for x in t)], [gold, *grads], F64)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("window", list(WINDOWS.values()), ids=list(WINDOWS))
def test_jax_runs(window: tuple[int, int], jit: bool) -> None:
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    q, k, v, d_out = _inputs()
    gold, grads = _gold(q, k, v, d_out, window)
    with x64(jax):

        def loss(a, b, c):
            out = ak.scaled_dot_product_attention(a, b, c, window=window, **KW)
            return jnp.sum(out * d_out), out

        fn = jax.grad(loss, argnums=(0, 1, 2), has_aux=True)
        fn = jax.jit(fn) if jit else fn
        (dq, dk, dv), out = fn(*(jnp.asarray(x) for x in (q, k, v)))
        _check(f"jax {'jit' if jit else 'eager'}", [out, dq, dk, dv], [gold, *grads], F64)


def test_jax_float32_run() -> None:
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    q, k, v, d_out = _inputs()
    gold, grads = _gold(q, k, v, d_out, (5, 3))
    f32 = [jnp.asarray(x, dtype=jnp.float32) for x in (q, k, v)]

    def loss(a, b, c):
        out = ak.scaled_dot_product_attention(a, b, c, window=(5, 3), **KW)
        return jnp.sum(out * jnp.asarray(d_out, dtype=jnp.float32)), out

    (dq, dk, dv), out = jax.jit(jax.grad(loss, argnums=(0, 1, 2), has_aux=True))(*f32)
    _check("jax jit float32", [out, dq, dk, dv], [gold, *grads], 2e-5)


@pytest.mark.parametrize("name", ["numpy", "jax"])
def test_map_blocks_matches_slicing_by_hand(name: str) -> None:
    backend = load(name)
    if not backend.available():
        pytest.skip(f"{name} is not installed")
    xp = backend.namespace()
    rng = np.random.default_rng(1)
    a = xp.asarray(rng.standard_normal((3, 20, 4)))
    b = xp.asarray(rng.standard_normal((3, 30, 4)))
    starts = [(0, 2, 7), (5, 9, 11), (10, 16, 13)]  # two operands' rows, then the body's own

    def body(at: Any, x: Any, y: Any) -> tuple[Any, Any]:
        tag = xp.astype(xp.asarray(at[2]), x.dtype)  # the tile's own entry, traced or not
        return x @ xp.matrix_transpose(y), xp.sum(x, axis=-1, keepdims=True) + tag

    got = map_blocks(backend, body, starts, (a, b), (5, 7))
    want = [body(at, a[..., at[0] : at[0] + 5, :], b[..., at[1] : at[1] + 7, :]) for at in starts]
    for n, g in enumerate(got):
        w = np.concatenate([np.asarray(x[n]) for x in want], axis=-2)
        assert tuple(g.shape) == w.shape, f"{name}: output {n} shape {g.shape}, expected {w.shape}"
        err = float(np.max(np.abs(np.asarray(g) - w)))
        assert err <= 1e-6, f"{name}: output {n} max error {err:.3e} > 1e-6"


def _hlo(jax: Any, L: int, grad: bool, kw: dict[str, Any]) -> tuple[int, int]:
    """(lines, while ops) of the jitted call's (or its gradient's) StableHLO."""
    jnp = jax.numpy
    x = jax.ShapeDtypeStruct((1, 2, L, 64), jnp.float32)

    def call(a, b, c):
        return ak.scaled_dot_product_attention(a, b, c, **kw)

    fn = call
    if grad:  # fmt: skip
        fn = jax.grad(lambda a, b, c: jnp.sum(call(a, b, c)), argnums=(0, 1, 2))
    text = jax.jit(fn).lower(x, x, x).as_text()
    return len(text.splitlines()), text.count("stablehlo.while")


HLO_CALLS = {"window 256": {"window": 256}, "dense": {}, "causal": {"is_causal": True}}


@pytest.mark.parametrize("kw", list(HLO_CALLS.values()), ids=list(HLO_CALLS))
@pytest.mark.parametrize("grad", [False, True], ids=["forward", "forward+backward"])
def test_hlo_does_not_grow_with_length(grad: bool, kw: dict[str, Any]) -> None:
    """The jitted program of a window-256, an unstructured or a causal call at L = 2048
    and L = 8192: the same number of while loops (at least one: the tiles), and a program
    at most 5% longer in lines (unrolled, it grew 4x; causal, 22x)."""
    jax = pytest.importorskip("jax")
    small, large = _hlo(jax, 2048, grad, kw), _hlo(jax, 8192, grad, kw)
    print(f"HLO {'grad' if grad else 'forward'}: L=2048 {small}, L=8192 {large} (lines, whiles)")
    assert small[1] >= 1, f"no while loop in the program at L=2048: {small}"
    assert large[1] == small[1], f"while loops: L=2048 {small[1]}, L=8192 {large[1]}"
    assert large[0] <= 1.05 * small[0], (
        f"HLO grew with L: {small[0]} lines at L=2048, {large[0]} at L=8192 (allowed 1.05x)"
    )


def test_explain_names_the_loop() -> None:
    jax = pytest.importorskip("jax")
    x = jax.numpy.zeros((1, 2, 512, 16))
    text = str(ak.explain(x, x, x, window=16, block_size=32))
    assert "jax.lax.scan" in text, text
    q = np.zeros((1, 2, 512, 16))
    text = str(ak.explain(q, q, q, window=16, block_size=32, impl="generic"))
    assert "strategy  row blocks" in text and "one by one in Python" in text, text


def _masked_gold(q, k, v, d_out, mask: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """The plain formula under ``mask`` (bool: allowed; float: added), rows with no key
    0 (attnkit's promise), torch.autograd in float64: out, (dq, dk, dv[, d_mask])."""
    t = [torch.tensor(x, requires_grad=True) for x in (q, k, v)]
    kk, vv = (x.repeat_interleave(2, dim=1) for x in t[1:])
    s = (t[0] @ kk.transpose(-1, -2)) / math.sqrt(E)
    m = torch.tensor(mask, requires_grad=mask.dtype != bool)
    s = s.masked_fill(~m, -math.inf) if mask.dtype == bool else s + m
    live = torch.isfinite(s).any(-1, keepdim=True)
    w = torch.softmax(torch.where(live, s, torch.zeros_like(s)), dim=-1) * live
    out = w @ vv
    out.backward(torch.tensor(d_out))
    grads = [x.grad.numpy() for x in t] + ([] if mask.dtype == bool else [m.grad.numpy()])
    return out.detach().numpy(), grads


MASKS = {
    # key padding, batch 1 with no key at all (its rows: output 0, gradients 0)
    "key padding (2, 1, 1, L)": np.stack([np.arange(L) < 50, np.zeros(L, bool)])[:, None, None],
    "additive (1, 1, 1, L)": np.random.default_rng(5).standard_normal((1, 1, 1, L)),
}


@pytest.mark.parametrize("mask", list(MASKS.values()), ids=list(MASKS))
def test_dense_runs_under_a_mask_of_one_row(mask: np.ndarray) -> None:
    """A mask (..., 1, S) is the same tile for every block of unstructured attention: the
    blocks still run as one loop (NumPy attention_vjp, JAX jit), with the mask's
    gradient where it is additive (its backward then goes block by block)."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    q, k, v, d_out = _inputs(3)
    gold, grads = _masked_gold(q, k, v, d_out, mask)
    names = ("out", "dq", "dk", "dv", "d_mask")[: 2 + len(grads)]
    out, vjp = ak.attention_vjp(q, k, v, attn_mask=mask, **KW)
    got = [out, *vjp(d_out)]
    for what, g, w in zip(names, got, [gold, *grads], strict=False):
        err = float(np.max(np.abs(np.asarray(g, dtype=np.float64) - w)))
        assert err <= F64, f"numpy: {what} max error {err:.3e} > allowed {F64:.1e}"
    with x64(jax):
        arrays = [jnp.asarray(x) for x in (q, k, v)]
        plan = str(ak.explain(*arrays, attn_mask=jnp.asarray(mask), **KW))
        assert "strategy  tiles" in plan and "jax.lax.scan" in plan, plan

        def loss(a, b, c, m):
            out = ak.scaled_dot_product_attention(a, b, c, attn_mask=m, **KW)
            return jnp.sum(out * d_out), out

        argnums = (0, 1, 2) if mask.dtype == bool else (0, 1, 2, 3)
        fn = jax.jit(jax.grad(loss, argnums=argnums, has_aux=True))
        got_grads, out = fn(*(jnp.asarray(x) for x in (q, k, v, mask)))
        for what, g, w in zip(names, [out, *got_grads], [gold, *grads], strict=False):
            err = float(np.max(np.abs(np.asarray(g, dtype=np.float64) - w)))
            assert err <= F64, f"jax jit: {what} max error {err:.3e} > allowed {F64:.1e}"


# --- causal attention as (query block, key block) tiles (attnkit.blocked.tile_loop) ----

#: (L, S, keyword arguments): calls whose query blocks all differ (no run), banded.
PAIR_CALLS = {
    "causal": (70, 70, {"is_causal": True}),
    "causal bottom-right, S > L": (70, 90, {"is_causal": True, "causal_alignment": "bottom_right"}),
    "causal bottom-right, L > S (empty rows)": (
        90, 70, {"is_causal": True, "causal_alignment": "bottom_right"}),
    "causal with offsets": (70, 70, {"is_causal": True, "q_offset": 3, "kv_offset": 5}),
    "window wider than the sequence": (70, 70, {"window": (100, 3)}),
}  # fmt: skip


def _allowed(L: int, S: int, kw: dict[str, Any]) -> np.ndarray:
    """Bool (L, S) of the call's allowed pairs, from positions (the oracle's own)."""
    shift = S - L if kw.get("causal_alignment") == "bottom_right" else 0
    qpos = np.arange(L)[:, None] + kw.get("q_offset", 0) + shift
    kpos = np.arange(S)[None, :] + kw.get("kv_offset", 0)
    ok = np.ones((L, S), bool)
    if kw.get("is_causal"):
        ok &= kpos <= qpos
    if "window" in kw:
        left, right = kw["window"]
        ok &= (kpos >= qpos - left) & (kpos <= qpos + right)
    return ok


def _pair_inputs(L: int, S: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    """q (2, 4, L, E), k (2, 2, S, E), v (2, 2, S, Ev), d_out (2, 4, L, Ev); NaN in the
    queries of rows with no key (they must give 0 and gradient 0)."""
    rng = np.random.default_rng(seed)
    shapes = ((2, 4, L, E), (2, 2, S, E), (2, 2, S, Ev), (2, 4, L, Ev))
    return tuple(rng.standard_normal(s) for s in shapes)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("call", list(PAIR_CALLS.values()), ids=list(PAIR_CALLS))
def test_jax_causal_pairs(call: tuple[int, int, dict[str, Any]], jit: bool) -> None:
    """Causal attention through the tile loop (explain says so) equals the plain formula,
    output and gradients, float64; rows with no key give 0 and gradient 0 even with NaN
    in their queries."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    L_, S_, kw = call
    q, k, v, d_out = _pair_inputs(L_, S_)
    allowed = _allowed(L_, S_, kw)
    empty = ~allowed.any(-1)  # (L,)
    gold, grads = _masked_gold(q, k, v, d_out, allowed)
    q = q.copy()
    q[..., empty, :] = math.nan  # never read: their rows attend nothing
    kw = {**kw, **KW}
    with x64(jax):
        arrays = [jnp.asarray(x) for x in (q, k, v)]
        plan = str(ak.explain(*arrays, **kw))
        assert "tiles: " in plan and "jax.lax.scan" in plan, plan

        def loss(a, b, c):
            out = ak.scaled_dot_product_attention(a, b, c, **kw)
            return jnp.sum(out * d_out), out

        fn = jax.grad(loss, argnums=(0, 1, 2), has_aux=True)
        (dq, dk, dv), out = (jax.jit(fn) if jit else fn)(*arrays)
    _check(f"jax tiles {'jit' if jit else 'eager'}", [out, dq, dk, dv], [gold, *grads], F64)
    if empty.any():
        assert np.all(np.asarray(out)[..., empty, :] == 0), "rows with no key must be 0"
        assert np.all(np.asarray(dq)[..., empty, :] == 0), "their dq must be 0"


def test_jax_window_past_the_keys_at_scale() -> None:
    """The case found from outside, at its size: L = 1025, S = 300, window (64, 0),
    kv_offset 37, float32 under jit (default tiles): output and gradients within 2e-5 of
    the float64 formula; 108 rows had lost keys (44 of them gave 0)."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    Lq, Sk, kw = 1025, 300, {"window": (64, 0), "kv_offset": 37}
    rng = np.random.default_rng(11)
    q, k, v, d_out = (rng.standard_normal(s) for s in ((1, 2, Lq, 8), (1, 2, Sk, 8),
                                                       (1, 2, Sk, 8), (1, 2, Lq, 8)))  # fmt: skip
    allowed = _allowed(Lq, Sk, kw)
    t = [torch.tensor(x, requires_grad=True) for x in (q, k, v)]
    s = (t[0] @ t[1].transpose(-1, -2)) / math.sqrt(8)
    w = torch.softmax(s.masked_fill(~torch.tensor(allowed), -math.inf), dim=-1).nan_to_num(0.0)
    gold_t = w @ t[2]
    gold_t.backward(torch.tensor(d_out))
    gold, grads = gold_t.detach().numpy(), [x.grad.numpy() for x in t]

    def loss(a, b, c):
        out = ak.scaled_dot_product_attention(a, b, c, **kw)
        return jnp.sum(out * jnp.asarray(d_out, dtype=jnp.float32)), out

    f32 = [jnp.asarray(x, dtype=jnp.float32) for x in (q, k, v)]
    assert "tiles: " in str(ak.explain(*f32, **kw))
    (dq, dk, dv), out = jax.jit(jax.grad(loss, argnums=(0, 1, 2), has_aux=True))(*f32)
    _check("jax window past the keys", [out, dq, dk, dv], [gold, *grads], 2e-5)


def test_jax_causal_pairs_float32_and_numpy_unchanged() -> None:
    """Float32 tiles under jit within 2e-5 of the float64 formula; NumPy (a Python loop:
    one block per query block, no tiles) says so in explain and agrees."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    q, k, v, d_out = _pair_inputs(L, L, seed=4)
    gold, grads = _masked_gold(q, k, v, d_out, _allowed(L, L, {"is_causal": True}))

    def loss(a, b, c):
        out = ak.scaled_dot_product_attention(a, b, c, is_causal=True, **KW)
        return jnp.sum(out * jnp.asarray(d_out, dtype=jnp.float32)), out

    f32 = [jnp.asarray(x, dtype=jnp.float32) for x in (q, k, v)]
    (dq, dk, dv), out = jax.jit(jax.grad(loss, argnums=(0, 1, 2), has_aux=True))(*f32)
    _check("jax tiles float32", [out, dq, dk, dv], [gold, *grads], 2e-5)
    assert "strategy  row blocks" in str(ak.explain(q, k, v, is_causal=True, **KW))
    out, vjp = ak.attention_vjp(q, k, v, is_causal=True, **KW)
    _check("numpy causal", [out, *vjp(d_out)], [gold, *grads], F64)


@pytest.mark.parametrize("name", ["numpy", "jax"])
def test_map_blocks_merges_pieces_into_rows(name: str) -> None:
    """Merged outputs: pieces of attention over disjoint keys (packed [acc | m | l], the
    online softmax) merge into their rows, equal to attention over the pieces' keys
    together; rows no tile reaches are attention over no key (acc 0, m -inf, l 0); a
    summed output beside."""
    backend = load(name)
    if not backend.available():
        pytest.skip(f"{name} is not installed")
    xp = backend.namespace()
    rng = np.random.default_rng(2)
    qn, kn, vn = (rng.standard_normal(s) for s in ((2, 12, 3), (2, 20, 3), (2, 20, 4)))
    # (query start, key start, value start); 4 query rows, 5 keys each
    starts = [(0, 0, 0), (0, 5, 5), (4, 10, 10), (8, 0, 0), (4, 15, 15)]

    def body(at: Any, q: Any, k: Any, v: Any) -> tuple[Any, Any]:
        s = q @ xp.matrix_transpose(k)  # (2, 4, 5)
        top = xp.max(s, axis=-1, keepdims=True)
        e = xp.exp(s - top)
        total = xp.sum(e, axis=-1, keepdims=True)
        packed = xp.concat([e @ v, top, total], axis=-1)  # (2, 4, 6): [acc | m | l]
        return packed, xp.ones_like(k)  # merged into query rows; summed into key rows

    q, k, v = (xp.asarray(x) for x in (qn, kn, vn))
    merged, counts = map_blocks(
        backend, body, starts, (q, k, v), (4, 5, 5), sums=((1, 20),), merges=((0, 16),)
    )
    packed = np.asarray(merged)
    assert packed.shape == (2, 16, 6), f"{name}: merged shape {packed.shape}, expected (2, 16, 6)"
    out, lse = (np.asarray(x) for x in finish_packed(merged))
    got = np.concatenate([out, lse[..., None]], axis=-1)  # (2, 16, 5): [out | lse]
    for rows, keys in (((0, 4), [0, 5]), ((4, 8), [10, 15]), ((8, 12), [0])):
        cols = np.concatenate([np.arange(a, a + 5) for a in keys])
        s = qn[:, rows[0] : rows[1]] @ kn[:, cols].swapaxes(-1, -2)
        w = np.exp(s - s.max(-1, keepdims=True))
        want_out = (w / w.sum(-1, keepdims=True)) @ vn[:, cols]
        want_lse = s.max(-1) + np.log(w.sum(-1))
        err = max(float(np.max(np.abs(got[:, rows[0] : rows[1], :4] - want_out))),
                  float(np.max(np.abs(got[:, rows[0] : rows[1], 4] - want_lse))))  # fmt: skip
        assert err <= 1e-6, f"{name}: rows {rows} max error {err:.3e} > 1e-6"
    assert np.all(got[:, 12:, :4] == 0) and np.all(np.isneginf(got[:, 12:, 4])), (
        f"{name}: rows no block reaches must be out 0, lse -inf: {got[:, 12:]}"
    )
    want_counts = np.zeros((2, 20, 3))
    for _, a, _ in starts:
        want_counts[:, a : a + 5] += 1
    assert np.array_equal(np.asarray(counts), want_counts), f"{name}: summed output wrong"
