"""``torch.compile(fullgraph=True)`` of attnkit's calls and of the drop-in module: a plain,
a causal, a GQA and a windowed call, and ``MultiheadAttention`` with a padding mask, are
captured in one graph each (fullgraph raises on any graph break) and give eager's
numbers; the backward pass runs through the compiled graph. The tests compile with the
``aot_eager`` backend (dynamo's capture and AOT autograd, without generating C++: seconds,
not minutes); the default inductor backend captures the same graph."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from attnkit.backends.torch.nn import MultiheadAttention  # noqa: E402

import attnkit as ak  # noqa: E402

F32 = 2e-6  # float32 outputs of size ~1: the same formula in another order


def _inputs(hkv: int = 4, L: int = 96) -> list[Any]:
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, L, 16, generator=gen, requires_grad=True)
    k = torch.randn(2, hkv, L, 16, generator=gen, requires_grad=True)
    v = torch.randn(2, hkv, L, 16, generator=gen, requires_grad=True)
    return [q, k, v]


CALLS = {
    "plain": ({}, 4),
    "causal": ({"is_causal": True}, 4),
    "gqa": ({"enable_gqa": True, "is_causal": True}, 2),
    "window": ({"window": (16, 0)}, 4),
    "key padding": ({"attn_mask": ak.masks.key_padding([96, 50])}, 4),
}


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Any:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("name", list(CALLS))
def test_call_compiles_in_one_graph_and_equals_eager(name: str) -> None:
    options, hkv = CALLS[name]
    q, k, v = _inputs(hkv)

    def attend(q: Any, k: Any, v: Any) -> Any:
        return ak.scaled_dot_product_attention(q, k, v, **options)

    compiled = torch.compile(attend, fullgraph=True, backend="aot_eager")
    got, want = compiled(q, k, v), attend(q, k, v)
    err = float((got - want).abs().max())
    assert err <= F32, f"{name}: compiled vs eager {err:.2e} > {F32}"
    grads = torch.autograd.grad(got.square().sum(), (q, k, v))
    eager = torch.autograd.grad(want.square().sum(), (q, k, v))
    for g, e, label in zip(grads, eager, "qkv", strict=True):
        err = float((g - e).abs().max())
        assert err <= 1e-5, f"{name}: d{label} compiled vs eager {err:.2e}"


def test_compiled_call_keeps_nan_out_of_masked_rows() -> None:
    """No concrete finiteness check inside a graph: a NaN in a future key still stays out
    of the rows before it (the executor's guarded path under compile)."""
    q, k, v = (x.detach() for x in _inputs())
    k = k.clone()
    k[:, :, 40] = float("nan")
    compiled = torch.compile(
        lambda q, k, v: ak.scaled_dot_product_attention(q, k, v, is_causal=True),
        fullgraph=True,
        backend="aot_eager",
    )
    out = compiled(q, k, v)
    assert bool(torch.isfinite(out[:, :, :40]).all()), "rows before the NaN key stay finite"
    assert bool(torch.isnan(out[:, :, 40:]).all()), "rows attending it are NaN, as eager"


def test_drop_in_module_compiles_in_one_graph() -> None:
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(32, 4, batch_first=True)
    mine = MultiheadAttention(32, 4, batch_first=True)
    mine.load_state_dict(theirs.state_dict())
    x = torch.randn(2, 10, 32)
    padding = torch.zeros(2, 10, dtype=torch.bool)
    padding[1, 6:] = True
    compiled = torch.compile(mine, fullgraph=True, backend="aot_eager")
    out, weights = compiled(x, x, x, key_padding_mask=padding)
    want, want_weights = theirs(x, x, x, key_padding_mask=padding)
    assert float((out - want).abs().max()) <= F32
    assert float((weights - want_weights).abs().max()) <= F32
    out.sum().backward()
    assert mine.in_proj_weight.grad is not None
