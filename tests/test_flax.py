"""``attnkit.backends.jax.flax.MultiHeadAttention``, the ``flax.nnx`` module: one
``nnx.Param`` per weight, the same numbers as attnkit's functional core on NumPy float64
(float32 within 2e-6), dropout only when not deterministic, and a jit + grad + optax
training step whose loss falls."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
nnx = pytest.importorskip("flax.nnx")
optax = pytest.importorskip("optax")

from attnkit.backends.jax.flax import MultiHeadAttention  # noqa: E402

import attnkit as ak  # noqa: E402

F32 = 2e-6  # float32 outputs of size ~1 against float64


def test_one_param_per_weight_with_torch_layout() -> None:
    model = MultiHeadAttention(16, 4, num_kv_heads=2, add_bias_kv=True, rngs=nnx.Rngs(0))
    shapes = {k: v.shape for k, v in nnx.state(model, nnx.Param).flat_state()}
    shapes = {".".join(map(str, k)): s for k, s in shapes.items()}
    assert shapes == {
        "q_weight": (16, 16),
        "k_weight": (8, 16),
        "v_weight": (8, 16),
        "out_weight": (16, 16),
        "q_bias": (16,),
        "k_bias": (8,),
        "v_bias": (8,),
        "out_bias": (16,),
        "bias_k": (8,),
        "bias_v": (8,),
    }, shapes


@pytest.mark.parametrize("options", [{}, {"is_causal": True}, {"window": (2, 0)}, {"rope": True}])
def test_equals_the_functional_core_in_float64(options: dict) -> None:
    model = MultiHeadAttention(16, 4, num_kv_heads=2, rngs=nnx.Rngs(1), **options)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 7, 16))
    padding = np.ones((2, 7), bool)
    padding[1, 5:] = False
    out, weights, _ = model(
        jnp.asarray(x, jnp.float32), key_padding_mask=jnp.asarray(padding), need_weights=True
    )
    params = ak.MultiHeadParams(
        *(None if p is None else np.asarray(p, np.float64) for p in model.params)
    )
    rope = ak.Rope() if options.get("rope") else None
    want = ak.multi_head_attention(
        x,
        params=params,
        num_heads=4,
        num_kv_heads=2,
        key_padding_mask=padding,
        is_causal=options.get("is_causal", False),
        window=options.get("window"),
        rope=rope,
        need_weights=True,
    )
    for got, exact, what in ((out, want.output, "output"), (weights, want.weights, "weights")):
        err = float(np.abs(np.asarray(got, np.float64) - exact).max())
        assert err <= F32, f"{options} {what}: max |flax - float64 core| = {err:.2e} > {F32}"


def test_dropout_only_when_not_deterministic() -> None:
    model = MultiHeadAttention(16, 4, dropout=0.5, rngs=nnx.Rngs(params=0, dropout=1))
    x = jax.random.normal(jax.random.key(3), (2, 6, 16))
    a, b = model(x), model(x)
    assert float(jnp.abs(a - b).max()) > 0, "two training calls draw different dropout"
    model.eval()
    c, d = model(x), model(x)
    assert float(jnp.abs(c - d).max()) == 0.0
    assert float(jnp.abs(c - model(x, deterministic=True)).max()) == 0.0


def test_jit_grad_optax_training_step_learns() -> None:
    model = MultiHeadAttention(16, 4, num_kv_heads=2, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    x = jax.random.normal(jax.random.key(1), (4, 8, 16))
    target = jnp.roll(x, 1, axis=1)  # each position copies its predecessor

    @nnx.jit
    def step(model: MultiHeadAttention, optimizer: nnx.Optimizer, x: jax.Array) -> jax.Array:
        def loss(model: MultiHeadAttention) -> jax.Array:
            return jnp.mean((model(x, is_causal=True) - target) ** 2)

        value, grads = nnx.value_and_grad(loss)(model)
        optimizer.update(model, grads)
        return value

    losses = [float(step(model, optimizer, x)) for _ in range(60)]
    assert losses[-1] < 0.5 * losses[0], f"loss {losses[0]:.3f} -> {losses[-1]:.3f}"
    assert all(np.isfinite(losses))
