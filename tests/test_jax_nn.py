"""``attnkit.backends.jax.dot_product_attention``, the drop-in for
``jax.nn.dot_product_attention``: the same call gives jax.nn's numbers on every row that
has a key (float32, 2e-6), an independent float64 NumPy formula's in float64 (1e-12),
0 where a row has no key (jax.nn: the mean of the values), under ``jax.jit`` and
``jax.grad`` too; bad calls raise attnkit errors naming the argument."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from attnkit.backends.jax import dot_product_attention  # noqa: E402

import attnkit as ak  # noqa: E402
from attnkit.app.bench.peers_jax import float64_enabled  # noqa: E402

F32 = 2e-6  # float32 outputs of size ~1: a few roundings, summed in another order
F64 = 1e-12  # float64: the same formula in another order


def oracle(q, k, v, bias, mask, scale, causal, q_len, kv_len, window) -> np.ndarray:
    """float64 NumPy: (B, T, N, H) layout, GQA by repeat, 0 for rows with no key."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    B, T, N, H = q.shape
    S, K = k.shape[1], k.shape[2]
    k, v = np.repeat(k, N // K, axis=2), np.repeat(v, N // K, axis=2)
    s = np.einsum("btnh,bsnh->bnts", q, k) * (1 / np.sqrt(H) if scale is None else scale)
    if bias is not None:
        s = s + np.asarray(bias, dtype=np.float64)
    keep = np.ones((B, N, T, S), dtype=bool)
    t, j = np.arange(T)[:, None], np.arange(S)[None, :]
    if mask is not None:
        keep &= np.asarray(mask)
    if causal:
        keep &= j <= t
    if window is not None:
        keep &= (j >= t - window[0]) & (j <= t + window[1])
    if q_len is not None:
        keep &= (np.arange(T)[None, :] < np.asarray(q_len)[:, None])[:, None, :, None]
    if kv_len is not None:
        keep &= (np.arange(S)[None, :] < np.asarray(kv_len)[:, None])[:, None, None, :]
    s = np.where(keep, s, -np.inf)
    top = np.max(s, axis=-1, keepdims=True)
    p = np.where(keep, np.exp(s - np.where(np.isfinite(top), top, 0)), 0)
    total = p.sum(-1, keepdims=True)
    p = np.where(total > 0, p / np.where(total > 0, total, 1), 0)
    return np.einsum("bnts,bsnh->btnh", p, v)


CASES = list(
    itertools.product(
        ["none", "bias", "mask", "both"],
        [False, True],  # is_causal
        [None, (2, 1), 1],  # local_window_size
        [False, True],  # sequence lengths
    )
)


def draw(seed: int, dtype: Any, T: int = 6, S: int = 9, N: int = 4, K: int = 2) -> tuple:
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((2, T, N, 8))
    k, v = rng.standard_normal((2, S, K, 8)), rng.standard_normal((2, S, K, 8))
    bias = rng.standard_normal((2, N, T, S))
    mask = rng.random((2, 1, T, S)) > 0.3
    lengths = (np.array([T, T - 3], np.int32), np.array([S, 4], np.int32))
    cast = [jnp.asarray(x, dtype=dtype) for x in (q, k, v, bias)]
    return (*cast, jnp.asarray(mask), *(jnp.asarray(n) for n in lengths))


def call_args(case: tuple, arrays: tuple) -> dict[str, Any]:
    kind, causal, window, lengths = case
    _q, _k, _v, bias, mask, q_len, kv_len = arrays
    return dict(
        bias=bias if kind in ("bias", "both") else None,
        mask=mask if kind in ("mask", "both") else None,
        is_causal=causal,
        local_window_size=window,
        query_seq_lengths=q_len if lengths else None,
        key_value_seq_lengths=kv_len if lengths else None,
    )


def rows_with_keys(kw: dict[str, Any], arrays: tuple) -> np.ndarray:
    """(B, T, N, 1) True where the row attends at least one key."""
    q, k, _v = arrays[:3]
    ones = np.ones(q.shape, np.float64)
    probe = oracle(
        ones,
        k,
        np.ones((*k.shape[:-1], 1)),
        None,
        kw["mask"],
        None,
        kw["is_causal"],
        kw["query_seq_lengths"],
        kw["key_value_seq_lengths"],
        _pair(kw["local_window_size"]),
    )
    return probe > 0.5


def _pair(w: Any) -> Any:
    return (w, w) if isinstance(w, int) else w


@pytest.mark.parametrize("case", CASES, ids=[str(c) for c in CASES])
def test_equals_jax_nn_and_the_float64_formula(case: tuple) -> None:
    seed = abs(hash(case)) % 2**31
    arrays = draw(seed, jnp.float32)
    kw = call_args(case, arrays)
    q, k, v = arrays[:3]
    got = np.asarray(dot_product_attention(q, k, v, **kw))
    theirs = np.asarray(jax.nn.dot_product_attention(q, k, v, **kw))
    live = rows_with_keys(kw, arrays)
    err = float(np.abs(np.where(live, got - theirs, 0)).max())
    assert err <= F32, f"{case}: max |attnkit - jax.nn| on rows with keys = {err:.2e} > {F32}"
    assert np.all(np.where(live, True, got == 0)), f"{case}: a row with no key is not 0"
    window = _pair(kw["local_window_size"])
    want = oracle(
        q,
        k,
        v,
        kw["bias"],
        kw["mask"],
        None,
        kw["is_causal"],
        kw["query_seq_lengths"],
        kw["key_value_seq_lengths"],
        window,
    )
    err = float(np.abs(got - want).max())
    assert err <= 1e-5, f"{case}: max |attnkit - float64| = {err:.2e} > 1e-5"


@pytest.mark.parametrize("case", CASES[::5], ids=[str(c) for c in CASES[::5]])
def test_float64_stays_float64_and_exact(case: tuple) -> None:
    with float64_enabled():
        arrays = draw(7, jnp.float64)
        kw = call_args(case, arrays)
        q, k, v = arrays[:3]
        got = dot_product_attention(q, k, v, scale=0.3, **kw)
        assert got.dtype == jnp.float64
        want = oracle(
            q,
            k,
            v,
            kw["bias"],
            kw["mask"],
            0.3,
            kw["is_causal"],
            kw["query_seq_lengths"],
            kw["key_value_seq_lengths"],
            _pair(kw["local_window_size"]),
        )
        err = float(np.abs(np.asarray(got) - want).max())
        assert err <= F64, f"{case}: float64 error {err:.2e} > {F64}"


def test_residual_jit_grad_and_unbatched() -> None:
    q, k, v, bias, mask, _q_len, kv_len = draw(3, jnp.float32)
    out, lse = dot_product_attention(q, k, v, is_causal=True, return_residual=True)
    ref_out, ref_lse = jax.nn.dot_product_attention(q, k, v, is_causal=True, return_residual=True)
    assert lse.shape == ref_lse.shape == (2, 6, 4)
    assert float(jnp.abs(lse - ref_lse).max()) <= F32 and float(jnp.abs(out - ref_out).max()) <= F32
    fn = jax.jit(lambda q, k, v, n: dot_product_attention(q, k, v, key_value_seq_lengths=n))
    want = jax.nn.dot_product_attention(q, k, v, key_value_seq_lengths=kv_len)
    assert float(jnp.abs(fn(q, k, v, kv_len) - want).max()) <= F32

    def loss(attend: Any, q: Any) -> Any:
        return jnp.sum(attend(q, k, v, bias=bias, is_causal=True) ** 2)

    g = jax.grad(lambda q: loss(dot_product_attention, q))(q)
    g_ref = jax.grad(lambda q: loss(jax.nn.dot_product_attention, q))(q)
    assert float(jnp.abs(g - g_ref).max()) <= 1e-5
    one = dot_product_attention(q[0], k[0], v[0], mask=mask[0])  # (T, N, H)
    assert one.shape == (6, 4, 8)
    assert (
        float(jnp.abs(one - jax.nn.dot_product_attention(q[0], k[0], v[0], mask=mask[0])).max())
        <= F32
    )


def test_fully_masked_row_is_zero_where_jax_nn_gives_the_mean() -> None:
    q, k, v = draw(5, jnp.float32)[:3]
    mask = jnp.ones((1, 1, 6, 9), bool).at[:, :, 2].set(False)
    got = dot_product_attention(q, k, v, mask=mask)
    theirs = jax.nn.dot_product_attention(q, k, v, mask=mask)
    assert float(jnp.abs(got[:, 2]).max()) == 0.0
    mean = jnp.repeat(v.mean(axis=1), 2, axis=1)  # (B, N, H): GQA heads repeated
    assert float(jnp.abs(theirs[:, 2] - mean).max()) <= 1e-5, "jax.nn: the mean of the values"


def test_poison_in_masked_keys_never_leaks() -> None:
    q, k, v = draw(6, jnp.float32)[:3]
    k = k.at[:, 5:].set(jnp.nan)
    v = v.at[:, 5:].set(jnp.inf)
    got = dot_product_attention(q, k, v, key_value_seq_lengths=jnp.array([5, 5], jnp.int32))
    assert bool(jnp.isfinite(got).all())


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"implementation": "cudnn"}, ["implementation='cudnn'", "jax.nn"]),
        ({"local_window_size": (1, -1)}, ["local_window_size", "(1, -1)"]),
        ({"bias": np.zeros((1, 2, 4, 6, 9))}, ["bias", "at most 4 axes", "(1, 2, 4, 6, 9)"]),
        ({"mask": np.zeros((6, 9))}, ["mask", "bool", "float32", "(6, 9)", "bias="]),
        ({"mask": np.ones((6, 9), np.int32)}, ["mask", "bool", "int32", "(6, 9)", "bias="]),
        ({"query_seq_lengths": np.array([1, 2, 3])}, ["query_seq_lengths", "(B,) = (2,)"]),
    ],
)
def test_bad_calls_name_the_argument(kwargs: dict[str, Any], words: list[str]) -> None:
    q, k, v = draw(8, jnp.float32)[:3]
    with pytest.raises(ak.AttnkitError) as info:
        dot_product_attention(q, k, v, **kwargs)
    for word in words:
        assert word in str(info.value), str(info.value)


def test_layout_errors() -> None:
    q, k, v = draw(9, jnp.float32)[:3]
    with pytest.raises(ak.ShapeError, match="multiple of K"):
        dot_product_attention(q[:, :, :3], k, v)
    with pytest.raises(ak.ShapeError, match=r"\(B, T, N, H\)"):
        dot_product_attention(q[0, 0], k, v)


def test_an_additive_float_mask_is_refused_as_jax_nn_refuses_it() -> None:
    """Issue 26 (1): a float ``mask=`` was cast to bool, inverting a 0/-inf mask."""
    q, k, v = draw(10, jnp.float32)[:3]
    additive = jnp.where(jnp.arange(9) < 4, 0.0, -jnp.inf)[None, None, None, :]  # (1, 1, 1, S)
    with pytest.raises(ValueError, match="mask"):
        jax.nn.dot_product_attention(q, k, v, mask=additive)
    with pytest.raises(ak.DTypeError) as info:
        dot_product_attention(q, k, v, mask=additive)
    for word in ("mask", "float32", "(1, 1, 1, 9)", "bool", "bias="):
        assert word in str(info.value), str(info.value)
    got = dot_product_attention(q, k, v, bias=additive)  # the fix the message names
    want = jax.nn.dot_product_attention(q, k, v, bias=additive)
    assert float(jnp.abs(got - want).max()) <= F32


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
def test_a_float32_bias_stays_float32_on_16_bit_inputs(dtype: Any) -> None:
    """Issue 26 (2): a float32 -1e9 bias cast to float16 became -inf and the row gave 0;
    jax.nn adds the bias to float32 scores: rows where all keys but key 0 carry -1e9 give
    key 0's value, and row 3, where every key carries -1e9, is the uniform softmax, not 0."""
    q, k, v = (x.astype(dtype) for x in draw(11, jnp.float32)[:3])
    bias = jnp.zeros((2, 4, 6, 9), jnp.float32).at[..., 1:].set(-1e9)  # key 0 only
    bias = bias.at[:, :, 3].set(-1e9)  # row 3: every key -1e9: uniform, not empty
    got = dot_product_attention(q, k, v, bias=bias)
    want = jax.nn.dot_product_attention(q, k, v, bias=bias)
    qc, kc, vc = (jnp.swapaxes(x, 1, 2) for x in (q, k, v))
    core = jnp.swapaxes(ak.scaled_dot_product_attention(qc, kc, vc, bias, enable_gqa=True), 1, 2)
    assert got.dtype == dtype
    err = float(jnp.abs(got.astype(jnp.float32) - want.astype(jnp.float32)).max())
    gap = float(jnp.abs(got.astype(jnp.float32) - core.astype(jnp.float32)).max())
    tol = 2 * float(jnp.finfo(dtype).eps) * 4  # outputs of size ~2: a few roundings
    assert err <= tol and gap <= tol, f"vs jax.nn {err:.2e}, vs the core {gap:.2e} > {tol:.2e}"
    assert float(jnp.abs(got[:, 3].astype(jnp.float32)).max()) > 0.1, "row 3 came back 0"


MASK_SHAPES = [(9,), (6, 9), (6, 1), (1, 9), (4, 6, 9), (1, 6, 9), (2, 1, 6, 9)]


@pytest.mark.parametrize("shape", MASK_SHAPES, ids=[str(s) for s in MASK_SHAPES])
@pytest.mark.parametrize("batched", [True, False])
def test_masks_and_biases_of_rank_below_4_as_jax_nn_reads_them(
    shape: tuple[int, ...], batched: bool
) -> None:
    """Issue 26 (3): jax.nn adds leading axes of 1 to a bias or mask of rank < 4."""
    if not batched and len(shape) == 4:
        shape = (1, *shape[1:])
    rng = np.random.default_rng(len(shape) * 10 + shape[-1])
    q, k, v = draw(12, jnp.float32)[:3]
    if not batched:
        q, k, v = q[0], k[0], v[0]
    keep = rng.random(shape) > 0.3
    keep[..., 0] = True  # every row keeps a key: jax.nn and attnkit then agree
    mask, bias = jnp.asarray(keep), jnp.asarray(rng.standard_normal(shape), jnp.float32)
    for kw in ({"mask": mask}, {"bias": bias}, {"mask": mask, "bias": bias}):
        got = dot_product_attention(q, k, v, **kw)
        want = jax.nn.dot_product_attention(q, k, v, **kw)
        assert got.shape == want.shape
        err = float(jnp.abs(got - want).max())
        assert err <= F32, f"{shape} {sorted(kw)}: {err:.2e}"


def test_unbatched_inputs_refuse_a_mask_with_a_batch_of_two() -> None:
    q, k, v = draw(13, jnp.float32)[:3]
    with pytest.raises(ak.ShapeError, match=r"bias has batch axis 2.*\(N, T, S\)"):
        dot_product_attention(q[0], k[0], v[0], bias=jnp.zeros((2, 1, 6, 9)))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16, jnp.bfloat16])
def test_the_residual_has_jax_nns_dtype_and_no_gradient(dtype: Any) -> None:
    """Issue 26 (3): the residual came back float32 and carried gradients; jax.nn returns
    it in the inputs' dtype under stop_gradient."""
    q, k, v = (x.astype(dtype) for x in draw(14, jnp.float32)[:3])
    _, lse = dot_product_attention(q, k, v, is_causal=True, return_residual=True)
    _, ref = jax.nn.dot_product_attention(q, k, v, is_causal=True, return_residual=True)
    assert lse.dtype == ref.dtype == dtype
    err = float(jnp.abs(lse.astype(jnp.float32) - ref.astype(jnp.float32)).max())
    assert err <= 4 * float(jnp.finfo(dtype).eps) * 4, f"residual differs by {err:.2e}"

    def through(attend: Any) -> Any:
        def loss(q: Any) -> Any:
            out, lse = attend(q, k, v, is_causal=True, return_residual=True)
            return jnp.sum(lse.astype(jnp.float32)) + 0 * jnp.sum(out.astype(jnp.float32))

        return jax.grad(loss)(q)

    assert float(jnp.abs(through(jax.nn.dot_product_attention)).max()) == 0.0
    assert float(jnp.abs(through(dot_product_attention)).max()) == 0.0
