"""The functional multi-head core: RoPE, the kv cache, initialization, errors, JAX."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from _helpers import x64

import attnkit as ak


def _complex_rope(x: np.ndarray, pos: np.ndarray, base: float, interleaved: bool) -> np.ndarray:
    R = x.shape[-1]
    theta = pos[:, None] * base ** (-np.arange(0, R, 2) / R)
    if interleaved:
        z = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(1j * theta)
        return np.stack([z.real, z.imag], -1).reshape(x.shape)
    z = (x[..., : R // 2] + 1j * x[..., R // 2 :]) * np.exp(1j * theta)
    return np.concatenate([z.real, z.imag], -1)


@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_equals_complex_rotation(interleaved: bool) -> None:
    x = np.random.default_rng(0).standard_normal((2, 3, 9, 10))
    got = ak.apply_rope(x, 4, ak.Rope(base=300.0, interleaved=interleaved))
    want = _complex_rope(x, np.arange(4, 13), 300.0, interleaved)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_rope_equals_hugging_face_llama_and_gptj() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import LlamaConfig
    from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb as gptj_rope
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb as llama_rope

    q, k = (torch.randn(2, 4, 7, 16, dtype=torch.float64) for _ in range(2))
    pos = torch.arange(3, 10)[None].expand(2, 7)
    cfg = LlamaConfig(hidden_size=64, num_attention_heads=4, rope_theta=500.0)
    cos, sin = LlamaRotaryEmbedding(config=cfg)(q, pos)
    want_q, want_k = llama_rope(q, k, cos, sin)
    # Hugging Face computes the frequencies in float32: allow that rounding (~1e-7 rad)
    tol = 2e-6
    for got, want in (
        (ak.apply_rope(q, 3, ak.Rope(500.0)), want_q),
        (ak.apply_rope(k, pos[:, None, :], ak.Rope(500.0)), want_k),
    ):
        err = float((got - want).abs().max())
        assert err <= tol, f"half-split RoPE vs Llama: {err:.2e} > {tol:.0e}"
    theta = torch.arange(7, dtype=torch.float64)[:, None] * 1e4 ** (
        -torch.arange(0, 16, 2, dtype=torch.float64) / 16
    )
    x = q.transpose(1, 2)  # GPT-J rotates (B, L, H, E)
    want = gptj_rope(x, torch.sin(theta)[None], torch.cos(theta)[None]).transpose(1, 2)
    got = ak.apply_rope(q, 0, ak.Rope(interleaved=True))
    assert float((got - want).abs().max()) <= 1e-12


def test_rope_scores_depend_on_relative_position_only() -> None:
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal((1, 8)), rng.standard_normal((1, 8))
    rope = ak.Rope(base=100.0)
    scores = [
        float((ak.apply_rope(q, m, rope) @ ak.apply_rope(k, n, rope).T)[0, 0])
        for m, n in ((5, 2), (13, 10), (103, 100))
    ]
    np.testing.assert_allclose(scores, scores[0], rtol=1e-10)


def test_rope_partial_and_positions_array() -> None:
    x = np.random.default_rng(2).standard_normal((2, 5, 12))
    rope = ak.Rope(rotary_dim=6)
    out = ak.apply_rope(x, 7, rope)
    np.testing.assert_array_equal(out[..., 6:], x[..., 6:])
    pos = np.broadcast_to(np.arange(7, 12), (2, 5))
    np.testing.assert_allclose(ak.apply_rope(x, pos, rope), out, atol=1e-12)
    with pytest.raises(ak.ShapeError, match="positions"):
        ak.apply_rope(x, np.arange(4), rope)
    with pytest.raises(ak.ShapeError, match="rotary_dim"):
        ak.apply_rope(x[..., :5], 0)
    with pytest.raises(ak.ParameterError, match="rotary_dim"):
        ak.Rope(rotary_dim=3)
    with pytest.raises(ak.ParameterError, match="base"):
        ak.Rope(base=1.0)


def _params(d=16, h=4, hkv=2, seed=0):
    return ak.init_multi_head_params(
        d, h, num_kv_heads=hkv, rng=np.random.default_rng(seed), dtype=np.float64
    )


def test_cache_append_and_errors() -> None:
    k = np.random.default_rng(3).standard_normal((2, 3, 4, 5))
    cache = ak.init_kv_cache((2,), 3, 6, 5, like=k)
    cache = ak.append_kv(cache, k, k)
    assert int(cache.length) == 4
    np.testing.assert_array_equal(cache.key[..., :4, :], k)
    assert (cache.key[..., 4:, :] == 0).all()
    with pytest.raises(ak.ShapeError, match="max_length"):
        ak.append_kv(cache, k, k)
    with pytest.raises(ak.DTypeError, match="dtype"):
        ak.append_kv(cache, k.astype(np.float32), k.astype(np.float32))
    with pytest.raises(ak.ShapeError, match="like the cache"):
        ak.append_kv(cache, k[:, :2], k[:, :2])
    with pytest.raises(ak.ParameterError, match="KVCache"):
        ak.append_kv((k, k, 0), k, k)


def test_decode_numpy_mqa_window_equals_full() -> None:
    p = _params(hkv=1)
    x = np.random.default_rng(4).standard_normal((3, 8, 16))
    kw = {
        "num_heads": 4,
        "num_kv_heads": 1,
        "is_causal": True,
        "window": (2, 0),
        "rope": ak.Rope(interleaved=True),
    }
    full = ak.multi_head_attention(x, params=p, **kw).output
    cache = ak.init_kv_cache((3,), 1, 8, 4, like=x)
    outs = []
    for t in range(8):
        res = ak.multi_head_attention(x[:, t : t + 1], params=p, cache=cache, **kw)
        cache = res.cache
        outs.append(res.output)
    np.testing.assert_allclose(np.concatenate(outs, 1), full, atol=1e-12)


def test_structured_mask_with_padding_equals_dense() -> None:
    p = _params()
    x = np.random.default_rng(5).standard_normal((2, 9, 16))
    kpm = np.arange(9)[None] < np.array([[9], [6]])
    window = ak.masks.sliding_window((2, 1))
    a = ak.multi_head_attention(
        x, params=p, num_heads=4, num_kv_heads=2, attn_mask=window, key_padding_mask=kpm
    ).output
    i, j = np.arange(9)[:, None], np.arange(9)[None]
    band = (j >= i - 2) & (j <= i + 1)
    b = ak.multi_head_attention(
        x, params=p, num_heads=4, num_kv_heads=2, attn_mask=band, key_padding_mask=kpm
    ).output
    np.testing.assert_allclose(a, b, atol=1e-12)


def test_errors_name_argument_and_fix() -> None:
    p = _params()
    x = np.random.default_rng(6).standard_normal((2, 5, 16))
    call = functools.partial(ak.multi_head_attention, x, params=p, num_kv_heads=2)
    with pytest.raises(ak.ParameterError, match="multiple of num_kv_heads"):
        call(num_heads=3)
    with pytest.raises(ak.ArgumentTypeError, match="MultiHeadParams"):
        ak.multi_head_attention(x, params={"q_weight": 1}, num_heads=4)
    with pytest.raises(ak.ShapeError, match="q_weight"):
        ak.multi_head_attention(x[..., :8], params=p, num_heads=4, num_kv_heads=2)
    with pytest.raises(ak.DTypeError, match="float32"):
        ak.multi_head_attention(x.astype(np.float32), params=p, num_heads=4, num_kv_heads=2)
    with pytest.raises(ak.ShapeError, match="key_padding_mask"):
        call(num_heads=4, key_padding_mask=np.ones((2, 4), bool))
    with pytest.raises(ak.ShapeError, match="same length"):
        call(x, x[:, :3], num_heads=4)
    odd = ak.init_multi_head_params(12, 4, rng=np.random.default_rng(0), dtype=np.float64)
    with pytest.raises(ak.ShapeError, match="rope"):  # E = 3: nothing to pair
        ak.multi_head_attention(x[..., :12], params=odd, num_heads=4, rope=ak.Rope())
    bias_kv = ak.init_multi_head_params(
        16, 4, add_bias_kv=True, rng=np.random.default_rng(0), dtype=np.float64
    )
    with pytest.raises(ak.ParameterError, match="structured"):
        ak.multi_head_attention(x, params=bias_kv, num_heads=4, attn_mask=ak.masks.causal())
    cache = ak.init_kv_cache((2,), 4, 8, 4, like=x)
    with pytest.raises(ak.ParameterError, match="add_bias_kv"):
        ak.multi_head_attention(x, params=bias_kv, num_heads=4, cache=cache)


@pytest.mark.parametrize("backend", ["numpy", "torch", "jax"])
def test_init_statistics_match_torch_scheme(backend: str) -> None:
    from attnkit import backends

    adapter = backends.load(backend)
    if not adapter.available():
        pytest.skip(f"{backend} is not installed")
    rng = adapter.make_rng(0)
    p = ak.init_multi_head_params(256, 8, rng=rng, add_bias_kv=True)
    w = adapter.to_numpy(p.q_weight)
    bound = np.sqrt(6 / (256 + 3 * 256))  # Xavier over the packed (3D, D) matrix
    assert np.abs(w).max() <= bound and abs(w.std() - bound / np.sqrt(3)) < 0.03 * bound
    o = adapter.to_numpy(p.out_weight)
    assert np.abs(o).max() <= 1 / 16 and abs(o.std() - 1 / 16 / np.sqrt(3)) < 0.002
    bk = adapter.to_numpy(p.bias_k)
    assert abs(bk.std() - 1 / 16) < 0.02
    assert (adapter.to_numpy(p.q_bias) == 0).all() and (adapter.to_numpy(p.out_bias) == 0).all()
    again = ak.init_multi_head_params(256, 8, rng=adapter.make_rng(0), add_bias_kv=True)
    assert np.array_equal(adapter.to_numpy(again.q_weight), w)


def test_jax_apply_jit_grad_equals_torch() -> None:
    jax = pytest.importorskip("jax")
    torch = pytest.importorskip("torch")
    from attnkit.backends.jax import mha

    with x64(jax):
        p64 = _params(hkv=2)
        x = np.random.default_rng(7).standard_normal((2, 6, 16))
        opts = {"num_heads": 4, "num_kv_heads": 2, "is_causal": True, "rope": ak.Rope()}
        jp = ak.MultiHeadParams(*(None if a is None else jax.numpy.asarray(a) for a in p64))

        def loss(params, x):
            return jax.numpy.sum(mha.apply(params, x, **opts).output ** 2)

        g = jax.jit(jax.grad(loss))(jp, jax.numpy.asarray(x))
        tp = ak.MultiHeadParams(
            *(None if a is None else torch.tensor(a, requires_grad=True) for a in p64)
        )
        (ak.multi_head_attention(torch.tensor(x), params=tp, **opts).output ** 2).sum().backward()
        for name in ("q_weight", "k_weight", "v_weight", "out_weight", "q_bias", "out_bias"):
            want = getattr(tp, name).grad.numpy()
            got = np.asarray(getattr(g, name))
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-11, err_msg=name)
