"""``torch.compile(fullgraph=True)`` of attnkit's calls and of the drop-in module: a plain,
a causal, a GQA and a windowed call, and ``MultiheadAttention`` with a padding mask, are
captured in one graph each (fullgraph raises on any graph break) and give eager's
numbers; the backward pass runs through the compiled graph. Without autograd a masked
call is SDPA selected by ``torch.cond`` on its output being finite. The tests compile with the
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


@pytest.mark.parametrize("grad", [False, True], ids=["no grad", "grad"])
def test_compiled_call_keeps_nan_out_of_masked_rows(grad: bool) -> None:
    """No concrete finiteness check inside a graph: a NaN in a future key still stays out
    of the rows before it (without autograd SDPA's output selected by torch.cond, else
    the executor's guarded path)."""
    q, k, v = (x.detach().requires_grad_(grad) for x in _inputs())
    k = k.detach().clone().requires_grad_(grad)
    with torch.no_grad():
        k[:, :, 40] = float("nan")
    compiled = torch.compile(
        lambda q, k, v: ak.scaled_dot_product_attention(q, k, v, is_causal=True),
        fullgraph=True,
        backend="aot_eager",
    )
    out = compiled(q, k, v)
    assert bool(torch.isfinite(out[:, :, :40]).all()), "rows before the NaN key stay finite"
    assert bool(torch.isnan(out[:, :, 40:]).all()), "rows attending it are NaN, as eager"


def _recording_backend(graphs: list[Any]) -> Any:
    def backend(gm: Any, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    return backend


_DENSE_MASK = torch.rand(1, 1, 96, 96, generator=torch.Generator().manual_seed(1)) > 0.3
SELECTED = {
    "causal": CALLS["causal"],
    "gqa": CALLS["gqa"],
    "bool mask": ({"attn_mask": _DENSE_MASK}, 4),
}


@pytest.mark.parametrize("name", list(SELECTED))
def test_call_is_one_operator_of_the_graph(name: str) -> None:
    """A call of tensors and plain values compiles to one ``attnkit::attention`` node
    (attnkit's eager call, the same at every L), equal to eager, the NaN guard at masked
    positions included (it runs inside the operator, on concrete values)."""
    options, hkv = SELECTED[name]
    q, k, v = (x.detach() for x in _inputs(hkv))
    graphs: list[Any] = []
    compiled = torch.compile(
        lambda q, k, v: ak.scaled_dot_product_attention(q, k, v, **options),
        fullgraph=True,
        backend=_recording_backend(graphs),
    )
    got = compiled(q, k, v)
    ops = [
        node
        for gm in graphs
        for node in gm.graph.nodes
        if node.op == "call_function" and "attnkit" in str(node.target)
    ]
    assert len(graphs) == 1 and len(ops) == 1, f"{name}: {len(graphs)} graphs, {len(ops)} ops"
    want = ak.scaled_dot_product_attention(q, k, v, **options)
    err = float((got - want).abs().max())
    assert err <= F32, f"{name}: compiled vs eager {err:.2e} > {F32}"
    bad = q.clone()
    bad[0, 0, 5, 3] = float("inf")  # a non-finite output: the guarded path runs
    got, want = compiled(bad, k, v), ak.scaled_dot_product_attention(bad, k, v, **options)
    same = (got == want) | (got - want).abs().le(F32) | (got.isnan() & want.isnan())
    assert bool(same.all()), f"{name}: the guarded path differs from eager"


def test_graph_does_not_grow_with_length() -> None:
    """A window call's compiled graph is one operator at L = 256 and L = 4096 alike."""
    sizes = []
    for L in (256, 4096):
        q, k, v = (torch.randn(1, 2, L, 16) for _ in range(3))
        graphs: list[Any] = []
        fn = torch.compile(
            lambda q, k, v: ak.scaled_dot_product_attention(q, k, v, window=(64, 64)),
            fullgraph=True,
            backend=_recording_backend(graphs),
        )
        fn(q, k, v)
        sizes.append(sum(len(gm.graph.nodes) for gm in graphs))
        torch._dynamo.reset()
    assert sizes[0] == sizes[1] and sizes[0] <= 8, f"graph nodes at L=256, 4096: {sizes}"


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
