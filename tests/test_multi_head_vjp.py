"""``attnkit.multi_head_attention_vjp``: gradients of a multi-head layer with respect to
its inputs and every parameter, against PyTorch's autograd through
``multi_head_attention`` in float64 (tolerance 1e-10), on NumPy; and a NumPy SGD loop."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import attnkit as ak

F64 = 1e-10


def _params(rng: np.random.Generator, D: int, H: int, Hkv: int, dk: int, dv: int) -> Any:
    E = D // H
    return ak.MultiHeadParams(
        rng.standard_normal((H * E, D)) * 0.3,
        rng.standard_normal((Hkv * E, dk)) * 0.3,
        rng.standard_normal((Hkv * E, dv)) * 0.3,
        rng.standard_normal((D, H * E)) * 0.3,
        rng.standard_normal(H * E),
        rng.standard_normal(Hkv * E),
        rng.standard_normal(Hkv * E),
        rng.standard_normal(D),
    )


CASES = {
    "self causal": ({"is_causal": True}, True, 4, 4),
    "cross, key padding": (
        {"key_padding_mask": np.array([[True] * 9, [True] * 5 + [False] * 4])},
        False,
        4,
        4,
    ),
    "gqa window": ({"window": (3, 1)}, True, 4, 2),
    "additive mask": ({"attn_mask": "float"}, False, 4, 1),
}


@pytest.mark.parametrize("name", list(CASES))
def test_multi_head_vjp_equals_torch_autograd(name: str) -> None:
    torch = pytest.importorskip("torch")
    options, self_attn, H, Hkv = CASES[name]
    rng = np.random.default_rng()
    D, L = 16, 9
    x = rng.standard_normal((2, L, D))
    kv = None if self_attn else rng.standard_normal((2, L, 12))
    params = _params(rng, D, H, Hkv, D if self_attn else 12, D if self_attn else 12)
    options = dict(options)
    if options.get("attn_mask") == "float":
        options["attn_mask"] = rng.standard_normal((L, L))
    out, vjp = ak.multi_head_attention_vjp(
        x, kv, None, params, num_heads=H, num_kv_heads=Hkv, **options
    )
    d_out = rng.standard_normal(out.shape)
    d_x, d_k, d_v, d_params = vjp(d_out)

    tx = torch.tensor(x, requires_grad=True)
    tkv = None if kv is None else torch.tensor(kv, requires_grad=True)
    tp = ak.MultiHeadParams(*(torch.tensor(w, requires_grad=True) for w in params[:8]))
    topts = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in options.items()}
    want = ak.multi_head_attention(tx, tkv, None, tp, num_heads=H, num_kv_heads=Hkv, **topts)
    err = float(np.abs(want.output.detach().numpy() - out).max())
    assert err <= F64, f"{name}: output {err:.2e} > {F64}"
    leaves = [tx, *([tkv] if tkv is not None else []), *tp[:8]]
    grads = torch.autograd.grad(want.output, leaves, torch.tensor(d_out))
    got = [d_x, *([d_k] if tkv is not None else []), *d_params[:8]]
    assert d_v is None and (d_k is None) == self_attn
    names = ["d_query", *(["d_key"] if tkv is not None else []), *ak.MultiHeadParams._fields[:8]]
    for g, w, label in zip(got, grads, names, strict=True):
        err = float(np.abs(g - w.numpy()).max())
        assert err <= F64, f"{name}: {label} {err:.2e} > {F64}"


def test_numpy_sgd_trains_the_layer() -> None:
    """Plain SGD on NumPy learns to copy the previous token (attnkit.vjp's docstring)."""
    rng = np.random.default_rng(0)
    L, V, D = 12, 6, 24
    params = ak.init_multi_head_params(D, 4, rng=rng, dtype="float64")
    pos = rng.standard_normal((L, D - V)) * 0.5
    losses = []
    for _ in range(150):
        tokens = rng.integers(V, size=(8, L))
        x = np.concatenate([np.eye(V)[tokens], np.broadcast_to(pos, (8, L, D - V))], axis=-1)
        y, vjp = ak.multi_head_attention_vjp(x, params=params, num_heads=4, is_causal=True)
        logits = y[:, 1:, :V]
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        target = np.eye(V)[tokens[:, :-1]]
        losses.append(float(-(np.log(p) * target).sum(-1).mean()))
        d_y = np.zeros_like(y)
        d_y[:, 1:, :V] = (p - target) / (8 * (L - 1))
        grads = vjp(d_y)[3]
        params = ak.MultiHeadParams(
            *(w if g is None else w - 2.0 * g for w, g in zip(params, grads, strict=True))
        )
    assert losses[-1] < 0.5 * losses[0], f"loss {losses[0]:.3f} -> {losses[-1]:.3f}"
