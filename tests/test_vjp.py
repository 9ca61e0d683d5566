"""``attnkit.attention_vjp``: the backward pass written once, against independent oracles.

Oracles: PyTorch's autograd through the plain float64 formula (``impl="reference"``),
central finite differences on NumPy float64 (no autodiff at all), and the same call on
every installed backend. Tolerances: float64 1e-11 against autograd (the same sums in
another order), 1e-6 relative against finite differences (step 1e-6), float32 2e-5
across backends, 16-bit 2e-2 against float64.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from attnkit.backends import NAMES, load

import attnkit as ak

F64 = 1e-11
F32 = 2e-5


def _arrays(rng: np.random.Generator, hq: int, hkv: int, L: int, S: int) -> list[Any]:
    q = rng.standard_normal((2, hq, L, 16))
    k = rng.standard_normal((2, hkv, S, 16))
    v = rng.standard_normal((2, hkv, S, 8))
    return [q, k, v]


CASES: dict[str, tuple[dict[str, Any], tuple[int, int, int, int]]] = {
    "plain": ({}, (4, 4, 40, 56)),
    "causal": ({"is_causal": True}, (4, 4, 40, 56)),
    "causal bottom-right, empty rows": (
        {"is_causal": True, "causal_alignment": "bottom_right"},
        (4, 4, 56, 40),
    ),
    "window": ({"window": (6, 3)}, (4, 4, 48, 48)),
    "window with offset": ({"window": (5, 5), "q_offset": 20}, (4, 4, 24, 48)),
    "gqa causal": ({"is_causal": True, "enable_gqa": True}, (4, 2, 40, 40)),
    "alibi": ({"is_causal": True, "score_mod": ak.score_mods.alibi(4)}, (4, 4, 40, 40)),
    "softcap": ({"score_mod": ak.score_mods.softcap(1.5)}, (4, 4, 40, 40)),
    "key padding": ({"attn_mask": ak.masks.key_padding([56, 21])}, (4, 4, 40, 56)),
    "documents": ({"attn_mask": ak.masks.documents([10, 25, 13])}, (4, 4, 48, 48)),
}


def _torch_oracle(arrays: list[Any], d_out: Any, **kwargs: Any) -> tuple[Any, list[Any]]:
    """Output and gradients by torch autograd through the plain float64 formula."""
    torch = pytest.importorskip("torch")
    leaves = [torch.tensor(a, requires_grad=True) for a in arrays[:3]]
    mask = kwargs.pop("attn_mask", None)
    if isinstance(mask, np.ndarray):
        mask = torch.tensor(mask, requires_grad=mask.dtype != np.bool_)
        if mask.requires_grad:
            leaves.append(mask)
    out = ak.scaled_dot_product_attention(*leaves[:3], attn_mask=mask, impl="reference", **kwargs)
    grads = torch.autograd.grad(out, leaves, torch.tensor(d_out))
    return out.detach().numpy(), [g.numpy() for g in grads]


def _assert_close(got: Any, want: Any, tol: float, what: str) -> None:
    err = float(np.max(np.abs(np.asarray(got, dtype=np.float64) - want))) if np.size(want) else 0.0
    assert err <= tol, f"{what}: error {err:.2e} > allowed {tol:.0e}"


@pytest.mark.parametrize("name", list(CASES))
def test_numpy_vjp_equals_autograd_of_the_formula(name: str) -> None:
    options, (hq, hkv, L, S) = CASES[name]
    rng = np.random.default_rng()
    arrays = _arrays(rng, hq, hkv, L, S)
    out, vjp = ak.attention_vjp(*arrays, block_size=16, **options)
    d_out = rng.standard_normal(out.shape)
    want_out, want = _torch_oracle(arrays, d_out, **options)
    _assert_close(out, want_out, F64, f"{name}: out")
    got = vjp(d_out)
    assert len(got) == 3
    for g, w, label in zip(got, want, ("dq", "dk", "dv"), strict=True):
        assert g.shape == w.shape and g.dtype == np.float64
        _assert_close(g, w, F64, f"{name}: {label}")


@pytest.mark.parametrize(
    "mask_shape", [(2, 4, 40, 56), (1, 1, 40, 56), (1, 56), (56,), (40, 1), ()]
)
def test_additive_mask_gets_its_gradient_summed_over_broadcast_axes(mask_shape: tuple) -> None:
    """d_mask comes back in the mask's own shape, 0-D and 1-D masks included."""
    rng = np.random.default_rng()
    arrays = _arrays(rng, 4, 4, 40, 56)
    mask = np.asarray(rng.standard_normal(mask_shape))
    if mask.ndim:
        mask[..., 0] = -np.inf  # a forbidden pair inside an additive mask
    out, vjp = ak.attention_vjp(*arrays, attn_mask=mask, block_size=16)
    d_out = rng.standard_normal(out.shape)
    _, want = _torch_oracle([*arrays], d_out, attn_mask=mask)
    got = vjp(d_out)
    assert len(got) == 4 and got[3].shape == mask.shape
    for g, w, label in zip(got, want, ("dq", "dk", "dv", "d_mask"), strict=True):
        _assert_close(np.nan_to_num(g), np.nan_to_num(w), F64, f"mask {mask_shape}: {label}")


def test_finite_differences_with_dropout_redrawn_from_the_rng() -> None:
    """No autodiff anywhere: central differences of the forward with the same seed."""
    rng = np.random.default_rng()
    q, k, v = _arrays(rng, 2, 2, 12, 12)
    seed = int(rng.integers(2**31))
    call = {"dropout_p": 0.3, "is_causal": True, "block_size": 4}
    out, vjp = ak.attention_vjp(q, k, v, rng=np.random.default_rng(seed), **call)
    again = ak.scaled_dot_product_attention(q, k, v, rng=np.random.default_rng(seed),
                                            impl="generic", **call)  # fmt: skip
    _assert_close(out, again, 0.0, "forward with the same seed")
    d_out = rng.standard_normal(out.shape)
    grads = vjp(d_out)
    _assert_close(grads[0], vjp(d_out)[0], 0.0, "a second vjp call")
    eps = 1e-6
    for which, array in enumerate((q, k, v)):
        for _ in range(4):
            index = tuple(int(rng.integers(n)) for n in array.shape)
            plus, minus = array.copy(), array.copy()
            plus[index] += eps
            minus[index] -= eps
            args = [q, k, v]
            f = []
            for moved in (plus, minus):
                args[which] = moved
                f.append(ak.scaled_dot_product_attention(
                    *args, rng=np.random.default_rng(seed), impl="generic", **call))  # fmt: skip
            numeric = float(np.sum((f[0] - f[1]) * d_out) / (2 * eps))
            analytic = float(grads[which][index])
            assert abs(numeric - analytic) <= 1e-6 * max(1.0, abs(numeric)), (
                f"d{'qkv'[which]}{index}: finite differences {numeric:.8f}, vjp {analytic:.8f}"
            )


def test_nan_padding_and_empty_rows_give_exact_zeros() -> None:
    rng = np.random.default_rng()
    q, k, v = _arrays(rng, 2, 2, 20, 20)
    k[..., 15:, :] = np.nan  # padding keys
    v[..., 15:, :] = np.inf
    v[..., 3, :] = np.inf  # a value some rows of a block attend and others do not
    mask = ak.masks.key_padding([15, 15])
    out, vjp = ak.attention_vjp(q, k, v, attn_mask=mask, window=(2, 0), block_size=8)
    rows_with_inf = np.zeros(20, dtype=bool)
    rows_with_inf[3:6] = True  # rows 3..5 attend key 3
    assert np.isfinite(out[..., ~rows_with_inf, :]).all(), "rows not attending key 3 are finite"
    dq, dk, dv = vjp(np.ones_like(out))
    assert np.isfinite(dq[..., ~rows_with_inf, :]).all()
    assert (dk[..., 15:, :] == 0).all() and (dv[..., 15:, :] == 0).all(), "padding: exactly 0"
    empty_out, empty_vjp = ak.attention_vjp(q, k, v, is_causal=True, q_offset=-5)
    dq, dk, dv = empty_vjp(np.ones_like(empty_out))
    assert (dq[..., :5, :] == 0).all(), "rows with nothing to attend: exactly 0"


def test_score_mod_callable_needs_autodiff_on_numpy() -> None:
    rng = np.random.default_rng()
    q, k, v = _arrays(rng, 2, 2, 8, 8)

    def halve(scores: Any, q_idx: Any, kv_idx: Any, head: Any) -> Any:
        return scores * 0.5

    out, vjp = ak.attention_vjp(q, k, v, score_mod=halve)
    with pytest.raises(ak.ParameterError, match="no autodiff"):
        vjp(np.ones_like(out))


def test_bad_cotangent_is_refused_naming_the_shape() -> None:
    rng = np.random.default_rng()
    q, k, v = _arrays(rng, 2, 2, 8, 8)
    _out, vjp = ak.attention_vjp(q, k, v)
    with pytest.raises(ak.ShapeError, match=r"output has shape \(2, 2, 8, 8\)"):
        vjp(np.ones((2, 2, 8, 7)))


def _available() -> list[str]:
    return [name for name in NAMES if load(name).available()]


@pytest.mark.parametrize("backend", _available())
@pytest.mark.parametrize("name", ["causal", "gqa causal", "window", "key padding", "softcap"])
def test_every_backend_gives_numpys_gradients(backend: str, name: str) -> None:
    options, (hq, hkv, L, S) = CASES[name]
    rng = np.random.default_rng()
    arrays = _arrays(rng, hq, hkv, L, S)
    b = load(backend)
    out64, vjp64 = ak.attention_vjp(*arrays, **options)
    d_out = rng.standard_normal(out64.shape)
    want = vjp64(d_out)
    xs = [b.from_numpy(a, "float32") for a in (*arrays, d_out)]
    out, vjp = ak.attention_vjp(*xs[:3], **options)
    _assert_close(b.to_numpy(out), out64, F32, f"{backend} {name}: out")
    for g, w, label in zip(vjp(xs[3]), want, ("dq", "dk", "dv"), strict=True):
        assert str(g.dtype).endswith("float32"), f"{backend}: {label} is {g.dtype}"
        _assert_close(b.to_numpy(g), w, F32 * 5, f"{backend} {name}: {label}")


@pytest.mark.parametrize("backend", [n for n in ("torch", "jax") if n in _available()])
def test_general_score_mod_is_differentiated_by_the_framework(backend: str) -> None:
    rng = np.random.default_rng()
    arrays = _arrays(rng, 2, 2, 16, 16)

    def squash(scores: Any, q_idx: Any, kv_idx: Any, head: Any) -> Any:
        return scores - 0.1 * scores * scores

    out64, vjp64 = ak.attention_vjp(
        *arrays, score_mod=ak.score_mods.ScoreMod(
            "squash", lambda s, qi, ki, h, xp: s - 0.1 * s * s,
            derivative=lambda s, m, qi, ki, h, xp: 1.0 - 0.2 * s))  # fmt: skip
    d_out = rng.standard_normal(out64.shape)
    want = vjp64(d_out)
    b = load(backend)
    xs = [b.from_numpy(a, "float64") for a in (*arrays, d_out)]
    _out, vjp = ak.attention_vjp(*xs[:3], score_mod=squash)
    for g, w, label in zip(vjp(xs[3]), want, ("dq", "dk", "dv"), strict=True):
        tol = F64 if str(g.dtype).endswith("float64") else 5 * F32  # JAX without x64
        _assert_close(b.to_numpy(g), w, tol, f"{backend}: {label}")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_inputs_accumulate_in_float32(dtype: str) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng()
    arrays = _arrays(rng, 4, 2, 40, 40)
    out64, vjp64 = ak.attention_vjp(*arrays, is_causal=True, enable_gqa=True)
    d_out = rng.standard_normal(out64.shape)
    want = vjp64(d_out)
    xs = [torch.tensor(a).to(getattr(torch, dtype)) for a in (*arrays, d_out)]
    _out, vjp = ak.attention_vjp(*xs[:3], is_causal=True, enable_gqa=True)
    tol = 2e-2 if dtype == "float16" else 1e-1
    for g, w, label in zip(vjp(xs[3]), want, ("dq", "dk", "dv"), strict=True):
        assert g.dtype == getattr(torch, dtype)
        _assert_close(g.float().numpy(), w, tol, f"{dtype}: {label}")


# --- the frameworks' autodiff through the same backward pass --------------------------


def test_torch_autograd_runs_attnkits_backward_saving_o_of_l() -> None:
    """impl="generic" under autograd: one autograd.Function whose saved tensors are q, k,
    v, the output and lse (no L x S array), gradcheck in float64."""
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(int(np.random.default_rng().integers(2**31)))
    q, k, v = (torch.randn(1, 2, 128, 8, generator=gen, dtype=torch.float64,
                           requires_grad=True) for _ in range(3))  # fmt: skip
    saved: list[int] = []

    def pack(t: Any) -> Any:
        saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = ak.scaled_dot_product_attention(q, k, v, is_causal=True, impl="generic")
    assert type(out.grad_fn).__name__ == "_AttentionFunctionBackward"
    biggest, total = max(saved), sum(saved)
    assert biggest <= q.numel() and total <= 5 * q.numel(), (
        f"saved {saved}: more than q, k, v, out and lse (L x S would be {2 * 128 * 128})"
    )
    for options in ({"is_causal": True}, {"window": (5, 2)}, {"enable_gqa": False}):
        small = [x.detach()[:, :1, :12, :4].clone().requires_grad_(True) for x in (q, k, v)]
        f = lambda q, k, v, o=options: ak.scaled_dot_product_attention(q, k, v, impl="generic", **o)  # noqa: E731
        assert torch.autograd.gradcheck(f, small), options
    bias = torch.randn(1, 1, 12, 12, dtype=torch.float64, generator=gen, requires_grad=True)
    small = [x.detach()[:, :1, :12, :4].clone().requires_grad_(True) for x in (q, k, v)]
    f = lambda q, k, v, m: ak.scaled_dot_product_attention(q, k, v, attn_mask=m, impl="generic")  # noqa: E731
    assert torch.autograd.gradcheck(f, (*small, bias)), "a learned additive bias"
    seed = int(torch.randint(2**31, (1,), generator=gen))
    f = lambda q, k, v: ak.scaled_dot_product_attention(  # noqa: E731
        q, k, v, dropout_p=0.25, rng=torch.Generator().manual_seed(seed), impl="generic"
    )
    assert torch.autograd.gradcheck(f, small), "dropout redrawn in the backward pass"


def test_jax_grad_runs_attnkits_backward_under_jit() -> None:
    jax = pytest.importorskip("jax")
    from _helpers import x64

    with x64(jax):
        jnp = jax.numpy
        rng = np.random.default_rng()
        q, k, v = (jnp.asarray(a) for a in _arrays(rng, 4, 2, 24, 24))
        padding = ak.masks.key_padding(jnp.asarray([24, 9]))

        def f(q: Any, k: Any, v: Any) -> Any:
            q, k, v = (jnp.asarray(x) for x in (q, k, v))  # check_grads perturbs in NumPy
            return ak.scaled_dot_product_attention(
                q, k, v, attn_mask=padding, enable_gqa=True, impl="generic"
            )

        jaxpr = str(jax.make_jaxpr(f)(q, k, v))
        assert "custom_vjp_call" in jaxpr, "the call is a custom_vjp for jax.grad"
        from jax.test_util import check_grads

        check_grads(jax.jit(f), (q, k, v), order=1, modes=["rev"])
        got = jax.jit(jax.grad(lambda q, k, v: (f(q, k, v) ** 2).sum(), argnums=(0, 1, 2)))(q, k, v)
        want = jax.grad(
            lambda q, k, v: (ak.scaled_dot_product_attention(
                q, k, v, attn_mask=padding, enable_gqa=True, impl="reference") ** 2).sum(),
            argnums=(0, 1, 2),
        )(q, k, v)  # fmt: skip
        for g, w, label in zip(got, want, "qkv", strict=True):
            _assert_close(np.asarray(g), np.asarray(w), F64, f"jax d{label}")


def test_explain_says_which_backward_runs() -> None:
    rng = np.random.default_rng()
    q, k, v = _arrays(rng, 2, 2, 8, 8)
    assert "attention_vjp" in ak.explain(q, k, v).backward
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(q)
    assert "attnkit's backward pass" in ak.explain(t, t, t, impl="generic").backward
    assert "fused kernel" in ak.explain(t, t, t, is_causal=True).backward
    assert "backward  " in str(ak.explain(t, t, t, impl="generic"))


@pytest.mark.parametrize("heads", [(2, 1), (1, 4)], ids=["value of one head", "key of one head"])
def test_gqa_with_one_head_broadcast_equals_torch_sdpa(heads: tuple[int, int]) -> None:
    """``enable_gqa=True`` with a key or value of one head: PyTorch repeats key and value
    heads separately, so the one head serves every query head. Forward on every path and
    gradients (attention_vjp on NumPy, torch autograd on every path) against torch
    SDPA's own enable_gqa in float64, within F64; the one head's gradient in its shape."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng()
    k_heads, v_heads = heads
    q, k, v = (
        rng.standard_normal(s) for s in ((2, 8, 12, 16), (2, k_heads, 10, 16), (2, v_heads, 10, 8))
    )
    d_out = rng.standard_normal((2, 8, 12, 8))
    leaves = [torch.tensor(x, requires_grad=True) for x in (q, k, v)]
    want = torch.nn.functional.scaled_dot_product_attention(*leaves, enable_gqa=True)
    want_grads = [g.numpy() for g in torch.autograd.grad(want, leaves, torch.tensor(d_out))]
    want = want.detach().numpy()
    for impl in ("auto", "generic", "reference"):
        out = ak.scaled_dot_product_attention(q, k, v, enable_gqa=True, impl=impl)
        _assert_close(out, want, F64, f"numpy {impl}: out")
        t = [torch.tensor(x, requires_grad=True) for x in (q, k, v)]
        out = ak.scaled_dot_product_attention(*t, enable_gqa=True, impl=impl)
        grads = torch.autograd.grad(out, t, torch.tensor(d_out))
        for g, w, label in zip(
            (out.detach(), *grads), (want, *want_grads), ("out", "dq", "dk", "dv"), strict=True
        ):
            _assert_close(g.numpy(), w, F64, f"torch {impl}: {label}")
    out, vjp = ak.attention_vjp(q, k, v, enable_gqa=True, block_size=4)
    got = vjp(d_out)
    _assert_close(out, want, F64, "attention_vjp: out")
    for g, w, x, label in zip(got, want_grads, (q, k, v), ("dq", "dk", "dv"), strict=True):
        assert g.shape == x.shape, f"attention_vjp {label}: shape {g.shape}, operand {x.shape}"
        _assert_close(g, w, F64, f"attention_vjp: {label}")
