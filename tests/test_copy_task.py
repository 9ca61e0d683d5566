"""A tiny 2-layer model built on attnkit's multi-head attention learns to copy.

The task: ``a1 .. aN SEP a1 .. aN``; after SEP the model must predict each token from
N + 1 positions back, which needs attention (causal, RoPE) and nothing else. Chance
cross-entropy is ln(8) = 2.08; both runs must end below ``LOSS_BOUND`` within
``STEPS`` Adam steps. PyTorch trains through the ``MultiheadAttention`` module; JAX
through the functional core under ``jax.grad`` and ``jax.jit``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import attnkit as ak

V, N, D, H = 8, 6, 32, 4  # vocabulary, copied length, model width, heads
SEP = V
STEPS = 200
LOSS_BOUND = 0.05


def copy_batch(rng: np.random.Generator, batch: int = 32) -> tuple[np.ndarray, np.ndarray]:
    a = rng.integers(0, V, (batch, N))
    seq = np.concatenate([a, np.full((batch, 1), SEP), a], axis=1)  # (B, 2N + 1)
    return seq[:, :-1], seq[:, 1:]  # inputs, next tokens


def test_torch_module_learns_copy_task() -> None:
    torch = pytest.importorskip("torch")
    from attnkit.backends.torch.nn import MultiheadAttention
    from torch import nn

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(V + 1, D)
            self.attn = nn.ModuleList(
                MultiheadAttention(D, H, batch_first=True, rope=True, is_causal=True)
                for _ in range(2)
            )
            self.norm = nn.ModuleList(nn.LayerNorm(D) for _ in range(2))
            self.mlp = nn.ModuleList(
                nn.Sequential(nn.Linear(D, 2 * D), nn.GELU(), nn.Linear(2 * D, D)) for _ in range(2)
            )
            self.out = nn.Linear(D, V)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.emb(x)  # (B, L, D)
            for attn, norm, mlp in zip(self.attn, self.norm, self.mlp, strict=True):
                y = norm(h)
                h = h + attn(y, y, y, need_weights=False)[0]
                h = h + mlp(h)
            return self.out(h)  # (B, L, V)

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = Model()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(STEPS):
        x, y = (torch.from_numpy(a) for a in copy_batch(rng))
        logits = model(x)[:, N:]  # predictions after SEP
        loss = nn.functional.cross_entropy(logits.reshape(-1, V), y[:, N:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    x, y = (torch.from_numpy(a) for a in copy_batch(np.random.default_rng(99), 256))
    with torch.no_grad():
        logits = model(x)[:, N:]
        held_out = float(nn.functional.cross_entropy(logits.reshape(-1, V), y[:, N:].reshape(-1)))
    assert held_out < LOSS_BOUND, f"held-out loss {held_out:.4f} >= {LOSS_BOUND} after {STEPS}"


def test_jax_functional_core_learns_copy_task() -> None:
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    from attnkit.backends.jax import mha

    keys = iter(jax.random.split(jax.random.key(0), 16))
    opts = {"num_heads": H, "is_causal": True, "rope": ak.Rope()}

    def dense(key, n_in, n_out):
        bound = 1 / math.sqrt(n_in)
        return {
            "w": jax.random.uniform(key, (n_in, n_out), minval=-bound, maxval=bound),
            "b": jnp.zeros(n_out),
        }

    params = {
        "emb": jax.random.normal(next(keys), (V + 1, D)),
        "layers": [
            {
                "attn": mha.init(next(keys), D, H),
                "ln": {"g": jnp.ones(D), "b": jnp.zeros(D)},
                "up": dense(next(keys), D, 2 * D),
                "down": dense(next(keys), 2 * D, D),
            }
            for _ in range(2)
        ],
        "out": dense(next(keys), D, V),
    }

    def layer_norm(x, p):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / jnp.sqrt(var + 1e-5) * p["g"] + p["b"]

    def forward(params, x):
        h = params["emb"][x]  # (B, L, D)
        for layer in params["layers"]:
            y = layer_norm(h, layer["ln"])
            h = h + mha.apply(layer["attn"], y, **opts).output
            up = jax.nn.gelu(h @ layer["up"]["w"] + layer["up"]["b"])
            h = h + up @ layer["down"]["w"] + layer["down"]["b"]
        return h @ params["out"]["w"] + params["out"]["b"]  # (B, L, V)

    def loss_fn(params, x, y):
        logp = jax.nn.log_softmax(forward(params, x)[:, N:])
        return -jnp.take_along_axis(logp, y[:, N:, None], axis=-1).mean()

    @jax.jit
    def train_step(params, m, v, t, x, y):
        loss, g = jax.value_and_grad(loss_fn)(params, x, y)
        m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, m, g)
        v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, v, g)
        lr = 3e-3 * jnp.sqrt(1 - 0.999**t) / (1 - 0.9**t)
        params = jax.tree.map(lambda p, m, v: p - lr * m / (jnp.sqrt(v) + 1e-8), params, m, v)
        return params, m, v, loss

    m = jax.tree.map(jnp.zeros_like, params)
    v = jax.tree.map(jnp.zeros_like, params)
    rng = np.random.default_rng(0)
    for t in range(1, STEPS + 1):
        x, y = copy_batch(rng)
        params, m, v, _ = train_step(params, m, v, t, jnp.asarray(x), jnp.asarray(y))
    x, y = copy_batch(np.random.default_rng(99), 256)
    held_out = float(jax.jit(loss_fn)(params, jnp.asarray(x), jnp.asarray(y)))
    assert held_out < LOSS_BOUND, f"held-out loss {held_out:.4f} >= {LOSS_BOUND} after {STEPS}"
