"""attnkit.backends.torch.nn.MultiheadAttention against torch.nn.MultiheadAttention.

120 random configurations (batch_first both ways, unbatched, kdim/vdim, bias,
add_bias_kv, add_zero_attn, bool/float key_padding_mask, 2-D/3-D bool/float attn_mask,
weights averaged or per head, need_weights off) in float64 (relative error <= 1e-10)
and float32 (<= 1e-5); gradients of a training step; fully masked rows (PyTorch: NaN,
attnkit: 0); state_dict both ways; decoding with the cache; dropout.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from attnkit.backends.torch.nn import MultiheadAttention, ScaledDotProductAttention  # noqa: E402

import attnkit as ak  # noqa: E402

# PyTorch warns when key_padding_mask and attn_mask differ in type; the mix is tested here.
pytestmark = pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask")

RTOL = {torch.float64: 1e-10, torch.float32: 1e-5}
N_CONFIGS = 120


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach(), want.detach()
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))


def check(what: str, got: torch.Tensor, want: torch.Tensor, tol: float, cfg: dict) -> None:
    assert not torch.isnan(got).any(), f"{what}: NaN in attnkit's result ({cfg})"
    err = rel_err(got, want)
    assert err <= tol, f"{what}: relative error {err:.3e} > allowed {tol:.1e} ({cfg})"


def random_config(rng: np.random.Generator) -> dict:
    heads = int(rng.choice([1, 2, 3, 4]))
    cfg = {
        "embed_dim": heads * int(rng.choice([2, 3, 5, 8])),
        "num_heads": heads,
        "batch_first": bool(rng.random() < 0.5),
        "bias": bool(rng.random() < 0.7),
        "add_bias_kv": bool(rng.random() < 0.3),
        "add_zero_attn": bool(rng.random() < 0.3),
        "kdim": int(rng.integers(2, 9)) if rng.random() < 0.3 else None,
        "vdim": int(rng.integers(2, 9)) if rng.random() < 0.3 else None,
    }
    cfg["call"] = {
        "B": int(rng.integers(1, 4)),
        "L": int(rng.integers(1, 8)),
        "S": int(rng.integers(1, 9)),
        "unbatched": bool(rng.random() < 0.1),
        "kpm": str(rng.choice(["none", "bool", "float"])),
        "mask": str(rng.choice(["none", "bool2d", "float2d", "bool3d", "float3d"])),
        "need_weights": bool(rng.random() < 0.8),
        "average": bool(rng.random() < 0.5),
        "dtype": torch.float64 if rng.random() < 0.6 else torch.float32,
    }
    return cfg


def make_inputs(cfg: dict, seed: int):
    c = cfg["call"]
    g = torch.Generator().manual_seed(seed)
    dt, B, L, S = c["dtype"], c["B"], c["L"], c["S"]
    D, kd, vd = cfg["embed_dim"], cfg["kdim"] or cfg["embed_dim"], cfg["vdim"] or cfg["embed_dim"]
    if c["unbatched"]:
        B = 1

    def x(n: int, d: int) -> torch.Tensor:
        t = torch.randn(B, n, d, generator=g, dtype=dt)
        if c["unbatched"]:
            return t[0]
        return t if cfg["batch_first"] else t.transpose(0, 1).contiguous()

    q, k, v = x(L, D), x(S, kd), x(S, vd)
    # every row keeps key 0, so no row is fully masked (PyTorch gives NaN there)
    keep = torch.rand(B, S, generator=g) < 0.7
    keep[:, 0] = True
    kpm = None
    if c["kpm"] == "bool":
        kpm = ~keep
    elif c["kpm"] == "float":
        kpm = torch.where(keep, torch.randn(B, S, generator=g, dtype=dt), -torch.inf).to(dt)
    if kpm is not None and c["unbatched"]:
        kpm = kpm[0]
    mask = None
    kind = c["mask"]
    if kind != "none" and not (kind.endswith("3d") and c["unbatched"]):
        shape = (L, S) if kind.endswith("2d") else (B * cfg["num_heads"], L, S)
        allow = torch.rand(shape, generator=g) < 0.7
        allow[..., 0] = True
        if kind.startswith("bool"):
            mask = ~allow
        else:
            mask = torch.where(allow, torch.randn(shape, generator=g, dtype=dt), -torch.inf)
    return q, k, v, kpm, mask


def pair(cfg: dict, seed: int):
    c = cfg["call"]
    kw = {
        k: cfg[k] for k in ("bias", "add_bias_kv", "add_zero_attn", "kdim", "vdim", "batch_first")
    }
    torch.manual_seed(seed)
    ref = torch.nn.MultiheadAttention(cfg["embed_dim"], cfg["num_heads"], dtype=c["dtype"], **kw)
    mine = MultiheadAttention(cfg["embed_dim"], cfg["num_heads"], dtype=c["dtype"], **kw)
    with torch.no_grad():  # non-zero biases, so they are tested too
        for name, p in ref.named_parameters():
            if "bias" in name:
                p.normal_()
    mine.load_state_dict(ref.state_dict())
    return ref, mine


@pytest.mark.parametrize("seed", range(N_CONFIGS))
def test_parity_with_torch_multihead(seed: int) -> None:
    cfg = random_config(np.random.default_rng(seed))
    c = cfg["call"]
    ref, mine = pair(cfg, seed)
    q, k, v, kpm, mask = make_inputs(cfg, seed)
    kwargs = {
        "key_padding_mask": kpm,
        "attn_mask": mask,
        "need_weights": c["need_weights"],
        "average_attn_weights": c["average"],
    }
    want_out, want_w = ref(q, k, v, **kwargs)
    got_out, got_w = mine(q, k, v, **kwargs)
    tol = RTOL[c["dtype"]]
    assert got_out.shape == want_out.shape and got_out.dtype == want_out.dtype
    check("output", got_out, want_out, tol, cfg)
    if c["need_weights"]:
        assert got_w.shape == want_w.shape, (got_w.shape, want_w.shape, cfg)
        check("weights", got_w, want_w, tol, cfg)
    else:
        assert got_w is None and want_w is None


@pytest.mark.parametrize("seed", range(8))
def test_training_step_gradients_equal(seed: int) -> None:
    cfg = random_config(np.random.default_rng(1000 + seed))
    cfg["call"].update(dtype=torch.float64, unbatched=False, need_weights=True)
    ref, mine = pair(cfg, seed)
    q, k, v, kpm, mask = make_inputs(cfg, seed)
    grads = []
    for module in (ref, mine):
        module.train()
        module.zero_grad()
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        out, w = module(*leaves, key_padding_mask=kpm, attn_mask=mask)
        loss = (out**2).sum() + (w * torch.linspace(0, 1, w.shape[-1], dtype=w.dtype)).sum()
        loss.backward()
        named = dict(module.named_parameters())
        grads.append(
            {
                **{n: p.grad for n, p in named.items()},
                **{f"input{i}": t.grad for i, t in enumerate(leaves)},
            }
        )
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        check(f"grad {name}", grads[1][name], grads[0][name], 1e-9, cfg)


def test_fully_masked_row_is_zero_where_torch_gives_nan() -> None:
    torch.manual_seed(0)
    ref = torch.nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64)
    mine = MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64)
    mine.load_state_dict(ref.state_dict())
    x = torch.randn(2, 4, 8, dtype=torch.float64)
    kpm = torch.zeros(2, 4, dtype=torch.bool)
    kpm[1] = True  # batch row 1: every key is padding
    want, _ = ref(x, x, x, key_padding_mask=kpm)
    got, got_w = mine(x, x, x, key_padding_mask=kpm)
    assert torch.isnan(want[1]).all(), "PyTorch changed: update attnkit's torch nn docstring"
    # attention output is 0, so the row's output is the output projection's bias
    torch.testing.assert_close(got[1], ref.out_proj.bias.expand(4, 8), rtol=0, atol=0)
    assert (got_w[1] == 0).all()
    check("valid rows", got[0], want[0], 1e-10, {"case": "fully masked"})
    got.sum().backward()
    assert all(not torch.isnan(p.grad).any() for p in mine.parameters())


def test_state_dict_loads_both_ways_and_names_match() -> None:
    for kw in ({}, {"kdim": 5, "vdim": 3}, {"add_bias_kv": True}, {"bias": False}):
        ref = torch.nn.MultiheadAttention(12, 3, **kw)
        mine = MultiheadAttention(12, 3, **kw)
        assert ref.state_dict().keys() == mine.state_dict().keys(), kw
        ref.load_state_dict(mine.state_dict())
        for (n, a), (_, b) in zip(ref.state_dict().items(), mine.state_dict().items(), strict=True):
            assert a.shape == b.shape and torch.equal(a, b), n


def test_init_follows_torch_scheme() -> None:
    """Bounds and spread of each parameter match PyTorch's initialization."""
    torch.manual_seed(0)
    ref = torch.nn.MultiheadAttention(256, 8, add_bias_kv=True)
    mine = MultiheadAttention(256, 8, add_bias_kv=True, generator=torch.Generator().manual_seed(0))
    for name, a in ref.named_parameters():
        b = dict(mine.named_parameters())[name]
        if "bias" in name and name not in ("bias_k", "bias_v"):
            assert (b == 0).all(), name
            continue
        a, b = a.detach(), b.detach()
        assert abs(float(a.std()) - float(b.std())) <= 0.08 * float(a.std()), name
        if name != "bias_k" and name != "bias_v":
            assert float(b.abs().max()) <= float(a.abs().max()) * 1.01 + 1e-6, name
    again = MultiheadAttention(256, 8, add_bias_kv=True, generator=torch.Generator().manual_seed(0))
    pairs = zip(mine.parameters(), again.parameters(), strict=True)
    assert all(torch.equal(p, q) for p, q in pairs)


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_decode_with_cache_equals_full_causal(kv_heads: int) -> None:
    torch.manual_seed(3)
    mha = MultiheadAttention(
        32,
        4,
        batch_first=True,
        num_kv_heads=kv_heads,
        rope=True,
        window=(5, 0),
        is_causal=True,
        dtype=torch.float64,
    ).eval()
    x = torch.randn(2, 10, 32, dtype=torch.float64)
    full, _ = mha(x, x, x)
    cache = mha.init_cache(2, 16)
    outs = []
    for start, stop in ((0, 3), *((t, t + 1) for t in range(3, 10))):
        out, _, cache = mha.decode(x[:, start:stop], cache)
        outs.append(out)
    check("decoded", torch.cat(outs, 1), full, 1e-12, {"kv_heads": kv_heads})


def test_gqa_equals_mha_with_repeated_kv_heads() -> None:
    rng = np.random.default_rng(0)
    hq, hkv, e, d = 6, 2, 4, 12
    p = ak.init_multi_head_params(d, hq, rng=rng, num_kv_heads=hkv, head_dim=e, dtype=np.float64)
    p = p._replace(
        q_bias=rng.standard_normal(hq * e),
        k_bias=rng.standard_normal(hkv * e),
        v_bias=rng.standard_normal(hkv * e),
    )

    def repeat(a: np.ndarray) -> np.ndarray:  # (Hkv*E, ...) -> (Hq*E, ...), head h -> h // G
        return np.repeat(a.reshape(hkv, e, *a.shape[1:]), hq // hkv, axis=0).reshape(
            hq * e, *a.shape[1:]
        )

    full = p._replace(
        k_weight=repeat(p.k_weight),
        v_weight=repeat(p.v_weight),
        k_bias=repeat(p.k_bias),
        v_bias=repeat(p.v_bias),
    )
    x = rng.standard_normal((3, 7, d))
    kw = {"is_causal": True, "rope": ak.Rope(), "need_weights": True, "average_weights": False}
    gqa = ak.multi_head_attention(x, params=p, num_heads=hq, num_kv_heads=hkv, **kw)
    mha = ak.multi_head_attention(x, params=full, num_heads=hq, **kw)
    np.testing.assert_allclose(gqa.output, mha.output, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gqa.weights, mha.weights, rtol=1e-12, atol=1e-12)


def test_dropout_only_in_training_and_reproducible() -> None:
    mha = MultiheadAttention(16, 2, dropout=0.5, batch_first=True)
    x = torch.randn(2, 6, 16)
    mha.eval()
    a, _ = mha(x, x, x)
    b, _ = mha(x, x, x)
    assert torch.equal(a, b)
    mha.train()
    mha.generator = torch.Generator().manual_seed(1)
    c, wc = mha(x, x, x, average_attn_weights=False)
    mha.generator = torch.Generator().manual_seed(1)
    d, _ = mha(x, x, x, average_attn_weights=False)
    assert torch.equal(c, d) and not torch.allclose(a, c)
    zeros = float((wc == 0).float().mean())
    assert 0.3 < zeros < 0.7, f"dropped fraction {zeros:.2f}, p = 0.5"


def test_is_causal_without_mask_and_rope_module() -> None:
    torch.manual_seed(0)
    mha = MultiheadAttention(16, 4, batch_first=True, dtype=torch.float64)
    x = torch.randn(1, 5, 16, dtype=torch.float64)
    causal = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)
    a, _ = mha(x, x, x, is_causal=True)
    b, _ = mha(x, x, x, attn_mask=causal)
    check("is_causal", a, b, 1e-12, {})


def test_scaled_dot_product_attention_module() -> None:
    import torch.nn.functional as F

    sdpa = ScaledDotProductAttention(dropout=0.3)
    q, k, v = (torch.randn(2, 3, 5, 8, dtype=torch.float64) for _ in range(3))
    mask = torch.rand(2, 1, 5, 5) < 0.7
    mask[0, 0, 2] = False  # a fully masked row: 0 here, and no NaN anywhere
    sdpa.eval()
    out, w = sdpa(q, k, v, mask)
    assert not torch.isnan(out).any() and (out[0, :, 2] == 0).all() and (w[0, :, 2] == 0).all()
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    keep = mask.any(-1, keepdim=True).expand_as(out[..., :1]).expand_as(out)
    check("sdpa module", out[keep], want[keep], 1e-12, {})
    sdpa.train()
    out2, _ = sdpa(q, k, v, mask)
    assert not torch.allclose(out, out2)


def test_module_errors_name_the_problem() -> None:
    with pytest.raises(ak.ParameterError, match="divisible"):
        MultiheadAttention(10, 3)
    with pytest.raises(ak.ParameterError, match="num_kv_heads"):
        MultiheadAttention(12, 4, num_kv_heads=3)
    mha = MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(2, 3, 8)
    with pytest.raises(ak.ShapeError, match="3-D attn_mask"):
        mha(x, x, x, attn_mask=torch.zeros(5, 3, 3, dtype=torch.bool))
    with pytest.raises(ak.ShapeError, match="key_padding_mask"):
        mha(x, x, x, key_padding_mask=torch.zeros(2, 4, dtype=torch.bool))
    with pytest.raises(ak.ShapeError, match="max_length"):
        cache = mha.init_cache(2, 4)
        mha.decode(x, cache)
        mha.decode(x, mha.decode(x, cache).cache)


def test_one_d_masks_as_the_readme_table_says() -> None:
    """Rows of the differences table in attnkit.backends.torch.nn's docstring (issue 26): a
    1-D key_padding_mask is refused by both modules; a 1-D attn_mask (S,) is refused by
    torch and accepted here, equal to the (1, S) mask."""
    torch.manual_seed(3)
    mine, theirs = (
        MultiheadAttention(8, 2, batch_first=True),
        torch.nn.MultiheadAttention(8, 2, batch_first=True),
    )
    x = torch.randn(2, 5, 8)
    padding = torch.tensor([False, False, True, False, True])  # (S,)
    with pytest.raises((AssertionError, RuntimeError, ValueError)):
        theirs(x, x, x, key_padding_mask=padding)
    with pytest.raises(ak.ShapeError, match=r"key_padding_mask must be \(batch, S\) = \(2, 5\)"):
        mine(x, x, x, key_padding_mask=padding)
    with pytest.raises((AssertionError, RuntimeError, ValueError)):
        theirs(x, x, x, attn_mask=padding)
    got, _ = mine(x, x, x, attn_mask=padding)
    want, _ = mine(x, x, x, attn_mask=padding[None, :])  # (1, S): every query row
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert not torch.equal(got, mine(x, x, x)[0]), "the 1-D mask changed nothing"
