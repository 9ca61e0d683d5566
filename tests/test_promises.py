"""Regression tests: every path keeps every promise (NaN never leaks, one meaning per mask,
the same answers on every impl). Each test names the case it pins down; every impl runs
on every installed backend."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from _helpers import x64

import attnkit as ak
from attnkit import masks

IMPLS = ("auto", "generic", "reference")


class Lib:
    """One array library: arrays from float64 NumPy, and back."""

    def __init__(self, name: str) -> None:
        self.name = name
        if name == "torch":
            self.mod = pytest.importorskip("torch")
        elif name == "jax":
            self.mod = pytest.importorskip("jax").numpy
        else:
            self.mod = np

    def asarray(self, a: Any, dtype: str = "float64") -> Any:
        a = np.asarray(a)
        if a.dtype == np.bool_:
            dtype = "bool"
        if self.name == "torch":
            return self.mod.from_numpy(np.array(a, dtype=dtype))
        return self.mod.asarray(np.array(a, dtype=dtype))

    def numpy(self, x: Any) -> np.ndarray:
        if self.name == "torch":
            return x.detach().double().numpy()
        return np.asarray(x, dtype=np.float64)


@pytest.fixture(params=["numpy", "torch", "jax"])
def lib(request: pytest.FixtureRequest) -> Iterator[Lib]:
    lib = Lib(request.param)
    if request.param != "jax":
        yield lib
        return
    import jax

    with x64(jax):  # float64 inside the test only
        yield lib


def normal(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def attend(lib: Lib, q: Any, k: Any, v: Any, **kwargs: Any) -> np.ndarray:
    conv = {
        key: lib.asarray(val) if isinstance(val, np.ndarray) else val for key, val in kwargs.items()
    }
    out = ak.scaled_dot_product_attention(lib.asarray(q), lib.asarray(k), lib.asarray(v), **conv)
    return lib.numpy(out)


def finite_rows(out: np.ndarray) -> np.ndarray:
    """Bool per query row (..., L): every output feature finite."""
    return np.isfinite(out).all(axis=-1)


def assert_rows_equal(got: np.ndarray, want: np.ndarray, rows: Any, what: str) -> None:
    diff = float(np.max(np.abs(got[..., rows, :] - want[..., rows, :]), initial=0.0))
    assert np.isfinite(got[..., rows, :]).all(), f"{what}: NaN/inf leaked into rows {rows}"
    assert diff <= 1e-12, f"{what}: rows {rows} moved by {diff:.3e} (allowed 1e-12)"


# --- item 1: NaN/inf in a key that a row may not attend -----------------------------------


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("poison", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_masked_key_never_leaks(lib: Lib, impl: str, poison: float, kind: str) -> None:
    q, k, v = normal(0, 1, 2, 4, 8), normal(1, 1, 2, 6, 8), normal(2, 1, 2, 6, 8)
    allowed = np.ones((4, 6), dtype=bool)
    allowed[0, 2] = False  # only row 0 may not attend key 2
    mask = allowed if kind == "bool" else np.where(allowed, 0.0, -np.inf)
    clean = attend(lib, q, k, v, attn_mask=mask, impl=impl)
    k[..., 2, :] = poison
    got = attend(lib, q, k, v, attn_mask=mask, impl=impl)
    assert_rows_equal(got, clean, [0], f"{kind} mask, key 2 = {poison}, impl={impl}")


@pytest.mark.parametrize("impl", IMPLS)
def test_causal_future_nan_key_never_leaks(lib: Lib, impl: str) -> None:
    q, k, v = normal(0, 1, 2, 6, 8), normal(1, 1, 2, 6, 8), normal(2, 1, 2, 6, 5)  # Ev != E
    clean = attend(lib, q, k, v, is_causal=True, impl=impl)
    k[..., 4, :] = math.nan
    got = attend(lib, q, k, v, is_causal=True, impl=impl)
    assert_rows_equal(got, clean, slice(0, 4), f"causal, NaN key 4, impl={impl}")
    assert not finite_rows(got)[..., 4:].any(), "rows 4 and 5 attend the NaN key"


@pytest.mark.parametrize("impl", IMPLS)
def test_window_inf_key_touches_only_its_rows(lib: Lib, impl: str) -> None:
    """window (3, 0) over L = S = 128, inf in key 20: rows 20-23 attend it, no other row
    may change (PyTorch's run kernel spread it to rows 0-31)."""
    q, k, v = (normal(i, 1, 2, 128, 8).astype(np.float32) for i in range(3))
    clean = attend(lib, q, k, v, window=(3, 0), impl=impl)
    k[..., 20, :] = math.inf
    got = attend(lib, q, k, v, window=(3, 0), impl=impl)
    bad = np.nonzero(~finite_rows(got)[0, 0])[0].tolist()
    assert set(bad) <= {20, 21, 22, 23}, f"impl={impl}: non-finite rows {bad}"
    others = [i for i in range(128) if i not in (20, 21, 22, 23)]
    assert_rows_equal(got, clean, others, f"window, inf key 20, impl={impl}")


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("poison", [math.nan, math.inf])
@pytest.mark.parametrize("call", ["window", "causal", "bool mask"])
def test_masked_value_never_leaks_into_rows_not_attending_it(
    lib: Lib, impl: str, poison: float, call: str
) -> None:
    """A NaN or inf *value* in a column that some rows of a block attend and others may
    not: IEEE's 0 * inf = NaN in the value product used to spread it to the others."""
    q, k, v = (normal(i + 3, 1, 2, 24, 8) for i in range(3))
    allowed = np.tril(np.ones((24, 24), dtype=bool))
    options = {
        "window": {"window": (3, 0)},
        "causal": {"is_causal": True},
        "bool mask": {"attn_mask": allowed},
    }[call]
    clean = attend(lib, q, k, v, impl=impl, **options)
    v[..., 15, :] = poison
    got = attend(lib, q, k, v, impl=impl, **options)
    reach = range(15, 19) if call == "window" else range(15, 24)
    others = [i for i in range(24) if i not in reach]
    assert_rows_equal(got, clean, others, f"{call}, value 15 = {poison}, impl={impl}")


# --- item 2: NaN in key/value columns no query may attend, structured masks ---------------


def _structured(lib: Lib, name: str) -> Any:
    keep = np.ones((4, 6), dtype=bool)
    keep[:, 5] = False
    return {
        "dense": lambda: masks.dense(lib.asarray(keep)),
        "segments": lambda: masks.segments(
            lib.asarray(np.array([0, 0, 1, 1]), "int64"),
            lib.asarray(np.array([0, 0, 1, 1, 1, 2]), "int64"),
        ),
        "causal": lambda: masks.causal(),
        "global_and_window": lambda: masks.global_tokens(1) & masks.sliding_window(1),
        "key_padding": lambda: masks.key_padding([5, 4]),
    }[name]()


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(
    "name", ["dense", "segments", "causal", "global_and_window", "key_padding"]
)
def test_dead_column_never_leaks_structured(lib: Lib, impl: str, name: str) -> None:
    q, k, v = normal(0, 2, 2, 4, 8), normal(1, 2, 2, 6, 8), normal(2, 2, 2, 6, 8)
    mask = _structured(lib, name)
    clean = attend(lib, q, k, v, attn_mask=mask, impl=impl)
    k[..., 5, :] = math.nan  # key 5 is out of every query's reach under each mask
    v[..., 5, :] = math.nan
    got = attend(lib, q, k, v, attn_mask=mask, impl=impl)
    assert_rows_equal(got, clean, slice(None), f"{name}, NaN in dead key 5, impl={impl}")


def _and_only_mask() -> np.ndarray:
    """Key 5 allowed by the mask for row 0 only; the window (None, 2) keeps it from row 0."""
    allowed = np.ones((4, 6), dtype=bool)
    allowed[1:, 5] = False
    return allowed


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(
    ("kwargs", "dead"),
    [
        ({"is_causal": True}, [4, 5]),  # L < S top-left: keys 4, 5 unreachable
        ({"window": 1}, [5]),  # row 3 sees keys 2-4
        ({"window": (None, 2), "attn_mask": _and_only_mask()}, [5]),
    ],
    ids=["causal_L_lt_S", "window", "mask_and_window"],
)
def test_dead_column_never_leaks_positional(lib: Lib, impl: str, kwargs: dict, dead: list) -> None:
    """Columns dead under causal/window structure, or only through the AND of attn_mask
    and a window."""
    q, k, v = normal(0, 1, 2, 4, 8), normal(1, 1, 2, 6, 8), normal(2, 1, 2, 6, 8)
    clean = attend(lib, q, k, v, impl=impl, **kwargs)
    for j, poison in zip(dead, [math.nan, math.inf], strict=False):
        k[..., j, :] = v[..., j, :] = poison
    got = attend(lib, q, k, v, impl=impl, **kwargs)
    assert_rows_equal(got, clean, slice(None), f"{kwargs}, impl={impl}")


@pytest.mark.parametrize("impl", IMPLS)
def test_empty_row_nan_query_gives_zero(lib: Lib, impl: str) -> None:
    q, k, v = normal(0, 1, 2, 4, 8), normal(1, 1, 2, 6, 8), normal(2, 1, 2, 6, 8)
    allowed = np.ones((4, 6), dtype=bool)
    allowed[1] = False  # row 1 attends nothing
    q[..., 1, :] = math.nan
    got = attend(lib, q, k, v, attn_mask=allowed, impl=impl)
    assert (got[..., 1, :] == 0).all(), f"impl={impl}: empty row gave {got[..., 1, :]}"
    assert np.isfinite(got).all()


# --- item 3: more value leading dims than q @ k^T, with an empty block ---------------------


@pytest.mark.parametrize("impl", IMPLS)
def test_value_with_more_leading_dims_and_empty_block(lib: Lib, impl: str) -> None:
    q, k, v = normal(0, 8, 4), normal(1, 3, 4), normal(2, 2, 3, 5)
    got = attend(lib, q, k, v, window=1, block_size=4, impl=impl)
    want = attend(Lib("numpy"), q, k, v, window=1, impl="reference")
    assert got.shape == (2, 8, 5)
    assert np.max(np.abs(got - want)) <= 1e-12
    assert (got[:, 4:] == 0).all()  # rows 4-7 have no key within one position


@pytest.mark.parametrize("impl", IMPLS)
def test_blocks_with_and_without_mask_leading_dims(lib: Lib, impl: str) -> None:
    """causal | dense(B-leading bool): interior blocks are all allowed (no leading dims),
    diagonal blocks carry the mask's batch axis; they concatenate into one output."""
    q, k, v = normal(0, 2, 1, 32, 4), normal(1, 2, 1, 32, 4), normal(2, 2, 1, 32, 4)
    extra = np.random.default_rng(3).random((2, 1, 32, 32)) < 0.1
    mask = masks.causal() | masks.dense(lib.asarray(extra))
    got = attend(lib, q, k, v, attn_mask=mask, block_size=8, impl=impl)
    allowed = np.tril(np.ones((32, 32), dtype=bool)) | extra
    want = attend(Lib("numpy"), q, k, v, attn_mask=allowed, impl="reference")
    assert np.max(np.abs(got - want)) <= 1e-12


# --- item 4: outputs stay connected to autograd -------------------------------------------


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(
    ("S", "kwargs"),
    [(0, {}), (4, {"is_causal": True, "kv_offset": 100}), (4, {"window": (0, 0), "q_offset": 9})],
    ids=["S0", "causal_out_of_reach", "window_out_of_reach"],
)
def test_no_key_output_has_zero_gradients(impl: str, S: int, kwargs: dict) -> None:
    torch = pytest.importorskip("torch")
    q = torch.randn(1, 2, 4, 8, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 2, S, 8, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 2, S, 8, dtype=torch.float64, requires_grad=True)
    out = ak.scaled_dot_product_attention(q, k, v, impl=impl, **kwargs)
    assert out.requires_grad, f"impl={impl}: output detached from autograd"
    out.sum().backward()
    for name, x in (("query", q), ("key", k), ("value", v)):
        assert x.grad is not None and (x.grad == 0).all(), f"{name} gradient {x.grad}"


# --- item 5: 16-bit inputs with a float32 additive mask -----------------------------------


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_low_precision_with_float32_mask_of_large_negatives(dtype: str) -> None:
    torch = pytest.importorskip("torch")
    q, k, v = (torch.randn(1, 2, 4, 8).to(getattr(torch, dtype)) for _ in range(3))
    mask = torch.zeros(4, 4)
    mask[0] = -1e30  # finite in float32, -inf once rounded to 16 bits
    # in float32, -1e30 + score rounds to -1e30 for every score: row 0 is the mean of v
    F = torch.nn.functional
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask)
    assert (want[..., 0, :] - v.float().mean(dim=-2)).abs().max().item() <= 1e-6
    for impl in IMPLS:
        out = ak.scaled_dot_product_attention(q, k, v, attn_mask=mask, impl=impl)
        err = (out.float() - want).abs().max().item()
        assert err <= 1e-2, f"impl={impl}: off by {err} (allowed 1e-2)"


# --- item 6: negative offsets and structures laid out from position 0 ----------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: masks.documents([3, 5]),
        lambda: masks.block_sparse([[True, False], [True, True]], 4),
        lambda: masks.bigbird(8, block_size=4),
    ],
    ids=["documents", "block_sparse", "bigbird"],
)
@pytest.mark.parametrize("offsets", [{"q_offset": -2}, {"kv_offset": -1}])
def test_negative_offsets_refused_for_layouts_from_zero(make: Any, offsets: dict) -> None:
    q, k, v = normal(0, 1, 8, 4), normal(1, 1, 8, 4), normal(2, 1, 8, 4)
    for impl in IMPLS:
        with pytest.raises(ak.ParameterError, match="defines no negative positions"):
            ak.scaled_dot_product_attention(q, k, v, attn_mask=make(), impl=impl, **offsets)


def test_negative_offsets_keep_working_for_positional_masks(lib: Lib) -> None:
    """Causal, windows, global tokens and key padding compare positions: negative ones are
    as meaningful as any, and every impl agrees with materialize()."""
    q, k, v = normal(0, 2, 1, 9, 4), normal(1, 2, 1, 11, 4), normal(2, 2, 1, 11, 4)
    for mask in (
        masks.causal(),
        masks.sliding_window((2, 1)),
        masks.global_tokens(1) | masks.sliding_window(1),
        masks.key_padding([2, 5]),
    ):
        dense = mask.materialize(np, 9, 11, q_offset=-3, kv_offset=-5)
        want = attend(Lib("numpy"), q, k, v, attn_mask=np.array(dense), impl="reference")
        for impl in IMPLS:
            got = attend(lib, q, k, v, attn_mask=mask, q_offset=-3, kv_offset=-5, impl=impl)
            assert np.max(np.abs(got - want)) <= 1e-12, f"{mask!r}, impl={impl}"


# --- item 7: masks.dense has one meaning -------------------------------------------------


def test_dense_of_float_array_is_refused(lib: Lib) -> None:
    with pytest.raises(ak.DTypeError, match=r"masks\.dense takes a bool array"):
        masks.dense(lib.asarray(np.zeros((4, 6))))


# --- item 8: 16-bit gradients on PyTorch's default path ----------------------------------


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", ["gqa", "float_mask"])
def test_low_precision_gradients_accumulate_in_float32(dtype: str, case: str) -> None:
    """16-bit gradients on the default path are as accurate as computing in float32 from
    the 16-bit inputs, with the output and the gradients rounded to 16 bits (within 1.5x
    that error; the generic path meets it at 1.0). PyTorch's CPU fused kernel was 2-4x
    that at L = 512 (GQA dK and dV, float-mask dK), and is not used for such calls."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    low = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(0)
    hq, hkv = (8, 2) if case == "gqa" else (4, 4)
    q = torch.randn(1, hq, 512, 64, generator=gen, dtype=torch.float64)
    k = torch.randn(1, hkv, 512, 64, generator=gen, dtype=torch.float64)
    v = torch.randn(1, hkv, 512, 64, generator=gen, dtype=torch.float64)
    mask = None
    if case == "float_mask":
        mask = torch.randn(1, 1, 512, 512, generator=gen, dtype=torch.float64)
    d_out = torch.randn(1, hq, 512, 64, generator=gen, dtype=torch.float64)

    def grads(fn: Any, compute: Any, out_dtype: Any = low) -> list[Any]:
        xs = [x.to(low).to(compute).requires_grad_(True) for x in (q, k, v)]
        m = None if mask is None else mask.to(low).to(compute)
        out = fn(*xs, attn_mask=m, enable_gqa=case == "gqa").to(out_dtype)
        (out.double() * d_out).sum().backward()
        return [x.grad.to(low).double() for x in xs]

    gold = grads(F.scaled_dot_product_attention, torch.float64, torch.float64)  # exact
    # float32 from the 16-bit values; the output rounded to 16 bits, so d_out rounds too
    base = grads(F.scaled_dot_product_attention, torch.float32)
    ours = grads(ak.scaled_dot_product_attention, low)
    for name, g, b, o in zip("qkv", gold, base, ours, strict=True):
        allowed = 1.5 * (b - g).abs().max().item()
        err = (o - g).abs().max().item()
        assert err <= allowed, f"d{name} {dtype} {case}: error {err:.3e} > allowed {allowed:.3e}"


# --- item 9: the lse of a row that attends a NaN score ------------------------------------


def test_lse_of_row_attending_nan_is_nan_everywhere(lib: Lib) -> None:
    q, k, v = normal(0, 1, 1, 3, 4), normal(1, 1, 1, 5, 4), normal(2, 1, 1, 5, 4)
    k[..., 1, :] = math.nan
    allowed = np.ones((3, 5), dtype=bool)
    allowed[2, 1] = False  # row 2 does not attend the NaN key
    for impl in IMPLS:
        out, lse = ak.scaled_dot_product_attention(
            *(lib.asarray(x) for x in (q, k, v)),
            attn_mask=lib.asarray(allowed),
            return_lse=True,
            impl=impl,
        )
        lse, out = lib.numpy(lse), lib.numpy(out)
        assert np.isnan(lse[..., :2]).all() and np.isnan(out[..., :2, :]).all(), impl
        assert np.isfinite(lse[..., 2]).all() and np.isfinite(out[..., 2, :]).all(), impl


def test_merge_keeps_nan_lse() -> None:
    out = np.ones((1, 2, 3))
    lse_a, lse_b = np.array([[math.nan, 0.0]]), np.array([[0.0, -math.inf]])
    merged, lse = ak.merge_partials([out, out], [lse_a, lse_b])
    assert math.isnan(lse[0, 0]) and np.isnan(merged[0, 0]).all()
    assert lse[0, 1] == 0.0 and (merged[0, 1] == 1.0).all()


# --- item 13: PyTorch's CausalBias -------------------------------------------------------


@pytest.mark.parametrize("variant", ["upper_left", "lower_right"])
@pytest.mark.parametrize("impl", IMPLS)
def test_torch_causal_bias_accepted(variant: str, impl: str) -> None:
    torch = pytest.importorskip("torch")
    from torch.nn.attention import bias

    q, k, v = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    mask = getattr(bias, f"causal_{variant}")(3, 5)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    got = ak.scaled_dot_product_attention(q, k, v, attn_mask=mask, impl=impl)
    assert (got - want).abs().max().item() <= 1e-5
    with pytest.raises(ak.ShapeError, match="causal bias for"):
        ak.scaled_dot_product_attention(q, k, v, attn_mask=getattr(bias, f"causal_{variant}")(3, 4))


# --- item 10: positions beyond 32-bit indices (JAX without x64) ----------------------------

_BIG_OFFSETS = """
import jax, jax.numpy as jnp, attnkit as ak
from attnkit import masks
assert not jax.config.jax_enable_x64
q = jax.random.normal(jax.random.key(0), (1, 2, 8, 4))
base = 2**31 + 5
out = ak.scaled_dot_product_attention(q, q, q, window=(2, 0), q_offset=base, kv_offset=base)
ref = ak.scaled_dot_product_attention(q, q, q, window=(2, 0))
assert float(jnp.abs(out - ref).max()) < 1e-6
out = ak.scaled_dot_product_attention(q, q, q, is_causal=True, q_offset=base, kv_offset=base)
assert float(jnp.abs(out - ak.scaled_dot_product_attention(q, q, q, is_causal=True)).max()) < 1e-6
try:
    ak.scaled_dot_product_attention(q, q, q, attn_mask=masks.global_tokens(1), q_offset=base)
except ak.ParameterError as e:
    assert "jax_enable_x64" in str(e), e
else:
    raise AssertionError("absolute positions beyond int32 were accepted")
print("ok")
"""


def test_window_offsets_beyond_int32_on_jax_without_x64() -> None:
    pytest.importorskip("jax")
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _BIG_OFFSETS], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


# --- found by the fuzzer -----------------------------------------------------------------


@pytest.mark.parametrize("impl", IMPLS)
def test_gqa_value_with_its_own_batch_and_no_keys(lib: Lib, impl: str) -> None:
    """GQA with a value carrying leading dims the scores lack, S = 0: the lse has the
    scores' leading dims and is broadcast to the output's."""
    q, k, v = normal(0, 2, 1, 1), normal(1, 1, 0, 1), normal(2, 2, 1, 0, 1)
    out, lse = ak.scaled_dot_product_attention(
        *(lib.asarray(x, "float32") for x in (q, k, v)),
        enable_gqa=True,
        return_lse=True,
        impl=impl,
    )
    assert tuple(out.shape) == (2, 2, 1, 1) and tuple(lse.shape) == (2, 2, 1)
    assert (lib.numpy(out) == 0).all() and (lib.numpy(lse) == -np.inf).all()


@pytest.mark.parametrize("impl", IMPLS)
def test_dead_values_of_one_batch_entry_never_leak(lib: Lib, impl: str) -> None:
    """Keys shared by the batch, values per batch entry: batch 0 may attend nothing, so
    its value rows are dead even though batch 1 attends the same key rows."""
    q, k, v = normal(0, 2, 1), normal(1, 2, 1), normal(2, 2, 2, 1)
    mask = np.array([False, True]).reshape(2, 1, 1)
    clean = attend(lib, q, k, v, attn_mask=mask, impl=impl)
    v[0] = math.nan
    got = attend(lib, q, k, v, attn_mask=mask, impl=impl)
    assert (got[0] == 0).all(), f"impl={impl}: batch 0 gave {got[0]}"
    assert_rows_equal(got, clean, slice(None), f"impl={impl}")
