"""The PyTorch modules of attnkit.approx: LinformerAttention, PerformerAttention,
NystromAttention (``attnkit.backends.torch.nn.approx``).

They are thin: each must compute exactly what the core function computes with the
module's own matrices, hold those matrices as parameters or buffers (state_dict, .to,
gradients), and draw them reproducibly from a generator or a seed.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from attnkit.backends.torch.nn.approx import (  # noqa: E402
    LinformerAttention,
    NystromAttention,
    PerformerAttention,
)

from attnkit import approx  # noqa: E402
from attnkit.errors import ParameterError, ShapeError  # noqa: E402

B, H, L, S, E = 2, 3, 10, 12, 8


def qkv(seed: int = 0, dtype=torch.float64, S: int = S):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, L, E, generator=g, dtype=dtype)
    k = torch.randn(B, H, S, E, generator=g, dtype=dtype)
    v = torch.randn(B, H, S, 5, generator=g, dtype=dtype)
    return q, k, v


def padding(S: int = S) -> torch.Tensor:
    return (torch.arange(S)[None, :] < torch.tensor([[7], [0]]))[:, None, :]  # (B, 1, S)


def test_linformer_module_is_the_core_with_learned_projections() -> None:
    m = LinformerAttention(S, 4, share_kv=False, seed=1, dtype=torch.float64)
    names = {n: p.shape for n, p in m.named_parameters()}
    assert names == {"proj_k": (4, S), "proj_v": (4, S)}
    q, k, v = qkv()
    out = m(q, k, v, key_padding_mask=padding())
    want = approx.linformer(q, k, v, proj_k=m.proj_k, proj_v=m.proj_v, key_padding_mask=padding())
    torch.testing.assert_close(out, want, rtol=0, atol=0)
    assert torch.all(out[1] == 0), "batch 1 has no live key"
    out.square().sum().backward()
    assert m.proj_k.grad is not None and m.proj_k.grad.abs().max() > 0
    assert torch.isfinite(m.proj_v.grad).all()


def test_linformer_module_shares_kv_and_takes_shorter_inputs() -> None:
    m = LinformerAttention(S, 4, init="mean", dtype=torch.float64)
    assert [n for n, _ in m.named_parameters()] == ["proj_k"]
    q, k, v = qkv(S=9)
    want = approx.linformer(q, k, v, proj_k=m.proj_k[:, :9])
    torch.testing.assert_close(m(q, k, v), want, rtol=0, atol=0)
    with pytest.raises(ShapeError, match="seq_len >= 13"):
        m(*qkv(S=13))


def test_linformer_module_seeds() -> None:
    a = LinformerAttention(S, 4, seed=5).proj_k
    b = LinformerAttention(S, 4, seed=5).proj_k
    c = LinformerAttention(S, 4, generator=torch.Generator().manual_seed(5)).proj_k
    assert torch.equal(a, b) and torch.equal(a, c)
    assert not torch.equal(a, LinformerAttention(S, 4, seed=6).proj_k)
    torch.manual_seed(0)
    d = LinformerAttention(S, 4).proj_k
    torch.manual_seed(0)
    assert torch.equal(d, LinformerAttention(S, 4).proj_k), "torch.manual_seed must fix it"


def test_performer_module_holds_its_features_as_a_buffer() -> None:
    m = PerformerAttention(E, 16, seed=3, dtype=torch.float64)
    assert list(m.state_dict()) == ["features"] and m.features.shape == (16, E)
    assert not list(m.parameters())
    w = approx.performer_features(
        16, E, rng=torch.Generator().manual_seed(3), like=torch.zeros(1, dtype=torch.float64)
    )
    assert torch.equal(m.features, w)
    q, k, v = qkv(1)
    out = m(q, k, v, key_padding_mask=padding())
    want = approx.performer(q, k, v, features=w, key_padding_mask=padding())
    torch.testing.assert_close(out, want, rtol=0, atol=0)
    other = PerformerAttention(E, 16, seed=99, dtype=torch.float64)
    other.load_state_dict(m.state_dict())
    torch.testing.assert_close(other(q, k, v), m(q, k, v), rtol=0, atol=0)


def test_performer_module_causal_and_redraw() -> None:
    m = PerformerAttention(E, 12, causal=True, chunk_size=3, seed=4, dtype=torch.float64)
    q, k, v = qkv(2)
    want = approx.performer(q, k, v, features=m.features, causal=True, chunk_size=7)
    torch.testing.assert_close(m(q, k, v), want, rtol=1e-12, atol=1e-12)
    before = m.features.clone()
    m.redraw_features(torch.Generator().manual_seed(8))
    again = PerformerAttention(E, 12, seed=4, dtype=torch.float64)
    again.redraw_features(torch.Generator().manual_seed(8))
    assert not torch.equal(before, m.features) and torch.equal(m.features, again.features)
    m.redraw_features()  # the module's own generator, advanced
    assert not torch.equal(m.features, again.features)


def test_performer_module_follows_to_and_float32_inputs() -> None:
    m = PerformerAttention(E, 16, seed=3).to(torch.float64)
    assert m.features.dtype == torch.float64
    q, k, v = qkv(3, dtype=torch.float32)
    out = m(q, k, v)  # features cast to the inputs' dtype
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    q.requires_grad_(True)
    m(q, k, v).sum().backward()
    assert torch.isfinite(q.grad).all() and q.grad.abs().max() > 0


def test_nystrom_module() -> None:
    m = NystromAttention(4, pinv_iterations=7)
    assert not list(m.parameters()) and "num_landmarks=4" in repr(m)
    q, k, v = qkv(4)
    want = approx.nystrom(q, k, v, num_landmarks=4, pinv_iterations=7, key_padding_mask=padding())
    torch.testing.assert_close(m(q, k, v, key_padding_mask=padding()), want, rtol=0, atol=0)
    with pytest.raises(ParameterError, match="num_landmarks=11 exceeds"):
        NystromAttention(11)(q, k, v)


def test_module_errors_name_the_argument() -> None:
    with pytest.raises(ParameterError, match="kind must be one of"):
        LinformerAttention(S, 4, init="conv")
    with pytest.raises(ParameterError, match="num_features must be a positive int"):
        PerformerAttention(E, 0)
