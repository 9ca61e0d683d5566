"""Dropout on every backend: reproducible from the rng, the right rate, the weights applied.

Backends and their generators: NumPy and array-api-strict take a
``numpy.random.Generator``, PyTorch a ``torch.Generator``, JAX a PRNG key. JAX runs in
float64 (``jax.enable_x64``) so every check uses the same float64 tolerances.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from _helpers import x64

import attnkit as ak

sdpa = ak.scaled_dot_product_attention
P = 0.3
TOL = 1e-12
# Most tests share one small shape and one block size: JAX compiles its random draw once per
# shape (about a second each on CPU), so few distinct shapes keep the file fast.
L_SMALL, S_SMALL, BLOCK = 64, 40, 16


def randn(seed: int, *shape: int) -> np.ndarray:
    """Fresh random normal float64 data (never zeros)."""
    return np.random.default_rng(seed).standard_normal(shape)


@dataclass
class Backend:
    name: str
    asarray: Callable[[np.ndarray], Any]
    make_rng: Callable[[int], Any]
    to_numpy: Callable[[Any], np.ndarray]


@pytest.fixture(params=["numpy", "torch", "jax", "strict"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    name = request.param
    if name == "numpy":
        yield Backend(name, np.asarray, np.random.default_rng, np.asarray)
    elif name == "torch":
        torch = pytest.importorskip("torch")
        yield Backend(
            name,
            torch.from_numpy,
            lambda seed: torch.Generator().manual_seed(seed),
            lambda x: x.detach().cpu().numpy(),
        )
    elif name == "jax":
        jax = pytest.importorskip("jax")
        with x64(jax):
            yield Backend(name, jax.numpy.asarray, jax.random.key, np.asarray)
    else:
        xps = pytest.importorskip("array_api_strict")
        yield Backend(name, xps.asarray, np.random.default_rng, np.asarray)


def problem(seed: int = 0, L: int = 256, S: int = 256) -> dict[str, np.ndarray]:
    """Random q, k, v (two heads) and a bool mask with ~20% masked and two empty rows."""
    mask = np.random.default_rng(seed + 3).random((L, S)) > 0.2
    mask[5] = False
    mask[L - 1] = False
    return {
        "query": randn(seed, 2, L, 16),
        "key": randn(seed + 1, 2, S, 16),
        "value": randn(seed + 2, 2, S, 8),
        "attn_mask": mask,
    }


def run(b: Backend, data: dict[str, np.ndarray], **kwargs: Any) -> tuple[np.ndarray, ...]:
    arrays = {k: b.asarray(v) for k, v in data.items()}
    result = sdpa(**arrays, **kwargs)
    if isinstance(result, tuple):
        return tuple(b.to_numpy(x) for x in result)
    return (b.to_numpy(result),)


def test_same_rng_state_same_result(backend: Backend) -> None:
    data = problem(L=L_SMALL, S=S_SMALL)
    kw = {"dropout_p": P, "return_weights": True, "block_size": BLOCK}
    out1, w1 = run(backend, data, rng=backend.make_rng(7), **kw)
    out2, w2 = run(backend, data, rng=backend.make_rng(7), **kw)
    assert np.array_equal(out1, out2)
    assert np.array_equal(w1, w2)
    assert not np.isnan(out1).any()


def test_different_seeds_differ(backend: Backend) -> None:
    data = problem(L=L_SMALL, S=S_SMALL)
    _, w1 = run(backend, data, dropout_p=P, rng=backend.make_rng(1), return_weights=True)
    _, w2 = run(backend, data, dropout_p=P, rng=backend.make_rng(2), return_weights=True)
    kept1, kept2 = w1 != 0, w2 != 0
    assert not np.array_equal(kept1, kept2)
    assert (kept1 != kept2).mean() > 0.2  # two independent masks disagree on ~2p(1-p)


def test_blocks_draw_different_masks(backend: Backend) -> None:
    # Every query block must get its own draw (JAX folds in the block number).
    data = problem(L=L_SMALL, S=S_SMALL)
    data["attn_mask"] = np.ones((L_SMALL, S_SMALL), dtype=bool)
    data["query"] = np.concatenate([data["query"][:, :BLOCK]] * (L_SMALL // BLOCK), axis=1)
    _, w = run(
        backend, data, dropout_p=P, rng=backend.make_rng(3), return_weights=True, block_size=BLOCK
    )
    blocks = [w[:, i : i + BLOCK] != 0 for i in range(0, L_SMALL, BLOCK)]
    assert not any(np.array_equal(blocks[0], other) for other in blocks[1:])


def test_dropout_zero_needs_no_rng(backend: Backend) -> None:
    data = problem(L=L_SMALL, S=S_SMALL)
    (plain,) = run(backend, data)
    (zero,) = run(backend, data, dropout_p=0.0)
    (zero_int,) = run(backend, data, dropout_p=0)
    (with_rng,) = run(backend, data, dropout_p=0.0, rng=backend.make_rng(0))
    assert np.array_equal(plain, zero)
    assert np.array_equal(plain, zero_int)
    assert np.array_equal(plain, with_rng)


def test_drop_rate(backend: Backend) -> None:
    data = problem()
    _, w0 = run(backend, data, return_weights=True)
    _, w = run(backend, data, dropout_p=P, rng=backend.make_rng(11), return_weights=True)
    live = w0 > 0  # non-masked positions (a softmax weight underflowing to 0 is impossible here)
    assert live.sum() > 50_000
    assert np.array_equal(live, np.broadcast_to(data["attn_mask"], w0.shape))
    rate = (w[live] == 0).mean()
    assert abs(rate - P) <= 0.01, f"empirical drop rate {rate:.4f}, p = {P}, allowed +-0.01"
    assert not (w[~live] != 0).any(), "dropout made a masked weight non-zero"


@pytest.mark.parametrize("block_size", [None, BLOCK])
@pytest.mark.parametrize("impl", ["generic", "reference"])
def test_returned_weights_are_applied(backend: Backend, impl: str, block_size: Any) -> None:
    data = problem(L=L_SMALL, S=S_SMALL)
    if impl == "reference" and block_size is not None:
        pytest.skip("the reference formula has no blocks")
    out, w = run(
        backend,
        data,
        dropout_p=P,
        rng=backend.make_rng(5),
        return_weights=True,
        impl=impl,
        block_size=block_size,
    )
    assert out.dtype == np.float64 and w.dtype == np.float64
    expected = w @ data["value"]
    err = np.abs(out - expected).max()
    assert err <= TOL, f"max |out - weights @ value| = {err:.3g}, allowed {TOL:g}"


def test_gqa_weights_applied(backend: Backend) -> None:
    data = problem(L=L_SMALL, S=S_SMALL)
    data["query"] = randn(21, 2, 6, L_SMALL, 16)  # Hq = 6 over Hkv = 2 key/value heads
    data["key"] = randn(22, 2, 2, S_SMALL, 16)
    data["value"] = randn(23, 2, 2, S_SMALL, 8)
    out, w = run(
        backend,
        data,
        dropout_p=P,
        rng=backend.make_rng(6),
        return_weights=True,
        enable_gqa=True,
        block_size=BLOCK,
    )
    assert w.shape == (2, 6, L_SMALL, S_SMALL)
    expected = w @ np.repeat(data["value"], 3, axis=1)  # query head h uses kv head h // 3
    err = np.abs(out - expected).max()
    assert err <= TOL, f"max |out - weights @ value| = {err:.3g}, allowed {TOL:g}"


def test_survivors_scaled(backend: Backend) -> None:
    data = problem(L=L_SMALL, S=S_SMALL)
    _, w0 = run(backend, data, return_weights=True)
    _, w = run(backend, data, dropout_p=P, rng=backend.make_rng(9), return_weights=True)
    kept = w != 0
    assert kept.sum() > 0.5 * (w0 > 0).sum()
    np.testing.assert_allclose(w[kept], w0[kept] / (1 - P), rtol=TOL, atol=0)
    # Row sums of the applied weights are no longer 1, but their mean over rows is ~1.
    sums = w.sum(-1)[w0.sum(-1) > 0]
    assert abs(sums.mean() - 1) < 0.05


def test_fully_masked_rows_stay_zero(backend: Backend) -> None:
    data = problem(L=L_SMALL, S=S_SMALL)
    empty = ~data["attn_mask"].any(-1)
    assert empty.sum() == 2  # such rows exist
    out, w, lse = run(
        backend,
        data,
        dropout_p=P,
        rng=backend.make_rng(4),
        return_weights=True,
        return_lse=True,
        block_size=BLOCK,
    )
    assert not np.isnan(out).any() and not np.isnan(w).any()
    assert np.array_equal(out[:, empty], np.zeros_like(out[:, empty]))
    assert np.array_equal(w[:, empty], np.zeros_like(w[:, empty]))
    assert np.isneginf(lse[:, empty]).all()
    assert (np.abs(out[:, ~empty]).sum(-1) > 0).all()


def test_causal_dropout_respects_structure(backend: Backend) -> None:
    data = problem(L=L_SMALL, S=S_SMALL)  # L > S: the last rows see every key
    del data["attn_mask"]
    _, w = run(
        backend,
        data,
        dropout_p=P,
        rng=backend.make_rng(8),
        return_weights=True,
        is_causal=True,
    )
    upper = np.triu(np.ones((L_SMALL, S_SMALL), dtype=bool), k=1)
    assert not w[:, upper].any()
    assert abs((w[:, ~upper] == 0).mean() - P) < 0.05


def test_numpy_generator_is_advanced() -> None:
    # A stateful generator: the second call with the same Generator draws a new mask.
    data = problem(L=L_SMALL, S=S_SMALL)
    rng = np.random.default_rng(0)
    _, w1 = sdpa(**data, dropout_p=P, rng=rng, return_weights=True)
    _, w2 = sdpa(**data, dropout_p=P, rng=rng, return_weights=True)
    assert not np.array_equal(w1 != 0, w2 != 0)


def test_strict_second_device() -> None:
    xps = pytest.importorskip("array_api_strict")
    device = xps.Device("device1")
    data = problem(L=L_SMALL, S=S_SMALL)
    arrays = {k: xps.asarray(v, device=device) for k, v in data.items()}
    out, w = sdpa(**arrays, dropout_p=P, rng=np.random.default_rng(2), return_weights=True)
    assert out.device == device and w.device == device
    cpu = xps.Device("CPU_DEVICE")
    out_np = np.asarray(out.to_device(cpu))
    w_np = np.asarray(w.to_device(cpu))
    assert np.abs(out_np - w_np @ data["value"]).max() <= TOL


def test_jax_jit_matches_eager() -> None:
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    data = problem(L=L_SMALL, S=S_SMALL)
    with x64(jax):
        arrays = {k: jnp.asarray(v) for k, v in data.items()}

        def call(query: Any, key: Any, value: Any, attn_mask: Any, rng: Any) -> Any:
            return sdpa(
                query,
                key,
                value,
                attn_mask=attn_mask,
                dropout_p=P,
                rng=rng,
                return_weights=True,
                block_size=BLOCK,
            )

        jitted = jax.jit(call)
        eager_out, eager_w = call(**arrays, rng=jax.random.key(12))
        jit_out, jit_w = jitted(**arrays, rng=jax.random.key(12))
        assert jit_out.dtype == jnp.float64
        assert np.array_equal(np.asarray(jit_w) == 0, np.asarray(eager_w) == 0)
        np.testing.assert_allclose(np.asarray(jit_out), np.asarray(eager_out), rtol=0, atol=TOL)
        np.testing.assert_allclose(np.asarray(jit_w), np.asarray(eager_w), rtol=0, atol=TOL)
        other_out, _ = jitted(**arrays, rng=jax.random.key(13))
        assert not np.array_equal(np.asarray(other_out), np.asarray(jit_out))


def test_jax_legacy_uint32_key() -> None:
    jax = pytest.importorskip("jax")
    data = problem(L=L_SMALL, S=S_SMALL)
    with x64(jax):
        arrays = {k: jax.numpy.asarray(v) for k, v in data.items()}
        a = sdpa(**arrays, dropout_p=P, rng=jax.random.PRNGKey(3))
        b = sdpa(**arrays, dropout_p=P, rng=jax.random.PRNGKey(3))
        assert np.array_equal(np.asarray(a), np.asarray(b))
