"""One table of malformed calls: each raises attnkit's own exception, naming the argument.

Every row is ``(id, call, expected exception class, facts)``: ``call()`` makes one bad
call and must raise an :class:`attnkit.AttnkitError` that is an instance of the expected
class (each also subclasses the builtin ``ValueError`` or ``TypeError``), whose message
contains every fact, the argument's name at least. Rows about PyTorch or JAX skip when
the library is missing. ``CASES`` are fixed by the score modifiers, the kv cache, RoPE and
multi-head attention (issue 14); ``CORE_CASES`` are the core's (validation, masks): the
spec of its fix, kept in the same table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import attnkit as ak
from attnkit import (
    ArgumentTypeError,
    AttnkitError,
    DeviceMismatchError,
    DTypeError,
    NamespaceMismatchError,
    ParameterError,
    ShapeError,
    masks,
    score_mods,
)

sdpa = ak.scaled_dot_product_attention
mha = ak.multi_head_attention

Case = tuple[str, Callable[[], Any], type[AttnkitError], list[str]]


def randn(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def qkv(q: tuple[int, ...], k: tuple[int, ...], v: tuple[int, ...] | None = None) -> tuple:
    return randn(*q, seed=1), randn(*k, seed=2), randn(*(k if v is None else v), seed=3)


def torch_qkv(q: tuple[int, ...], k: tuple[int, ...]) -> tuple:
    torch = pytest.importorskip("torch")
    return tuple(torch.from_numpy(a) for a in qkv(q, k))


def jax_qkv(q: tuple[int, ...], k: tuple[int, ...]) -> tuple:
    jnp = pytest.importorskip("jax.numpy")
    return tuple(jnp.asarray(a, dtype=jnp.float32) for a in qkv(q, k))


def params(d: int = 8, heads: int = 4) -> ak.MultiHeadParams:
    return ak.init_multi_head_params(
        d, heads, rng=np.random.default_rng(0), dtype=np.float64, backend="numpy"
    )


X = randn(2, 5, 8, seed=4)  # (B, L, D) for multi-head attention, D = 8, 4 heads of E = 2


def cache(batch: tuple[int, ...] = (2,), like: Any = X) -> ak.KVCache:
    return ak.init_kv_cache(batch, 4, 8, 2, like=like)


def nn_module(**kw: Any) -> Any:
    pytest.importorskip("torch")
    from attnkit.backends.torch.nn import MultiheadAttention

    return MultiheadAttention(8, 4, batch_first=True, **kw)


def torch_x(*shape: int) -> Any:
    torch = pytest.importorskip("torch")
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


# --- score modifiers ------------------------------------------------------------------------


def alibi_on_wrong_heads(arrays: Callable[..., tuple]) -> Callable[[], Any]:
    return lambda: sdpa(*arrays((2, 4, 5, 8), (2, 4, 6, 8)), score_mod=score_mods.alibi(3))


def alibi_under_jit() -> Any:
    jax = pytest.importorskip("jax")
    q, k, v = jax_qkv((2, 4, 5, 8), (2, 4, 6, 8))
    mod = score_mods.alibi(3)
    return jax.jit(lambda q, k, v: sdpa(q, k, v, score_mod=mod))(q, k, v)


def scores_mod(fn: Callable[..., Any], arrays: Callable[..., tuple] = qkv) -> Callable[[], Any]:
    return lambda: sdpa(*arrays((2, 4, 5, 8), (2, 4, 6, 8)), score_mod=fn)


def take_row(s: Any, q: Any, k: Any, h: Any) -> Any:
    return s[..., :1, :1, None]  # (2, 4, 1, 1, 1): not the scores' shape


SCORE_MOD_CASES: list[Case] = [
    (
        "alibi_3_on_4_heads",
        alibi_on_wrong_heads(qkv),
        ParameterError,
        ["score_mod", "alibi(3)", "num_heads=3", "Hq=4", "alibi(4)"],
    ),
    (
        "alibi_3_on_4_heads_torch",
        alibi_on_wrong_heads(torch_qkv),
        ParameterError,
        ["score_mod", "alibi(3)", "Hq=4"],
    ),
    (
        "alibi_3_on_4_heads_jax",
        alibi_on_wrong_heads(jax_qkv),
        ParameterError,
        ["score_mod", "alibi(3)", "Hq=4"],
    ),
    (
        "alibi_3_on_4_heads_jax_jit",
        alibi_under_jit,
        ParameterError,
        ["score_mod", "alibi(3)", "Hq=4"],
    ),
    (
        "check_score_mod_heads",
        lambda: score_mods.check_score_mod(score_mods.alibi(8), 4),
        ParameterError,
        ["score_mod", "alibi(8)", "num_heads=8", "Hq=4", "alibi(4)"],
    ),
    (
        "check_score_mod_not_callable",
        lambda: score_mods.check_score_mod("alibi", 4),
        ParameterError,
        ["score_mod", "str"],
    ),
    (
        "score_mod_wrong_shape",
        scores_mod(take_row),
        ShapeError,
        ["score_mod", "(2, 4, 1, 1, 1)", "(2, 4, 5, 6)"],
    ),
    (
        "score_mod_wrong_shape_torch",
        scores_mod(take_row, torch_qkv),
        ShapeError,
        ["score_mod", "(2, 4, 1, 1, 1)", "(2, 4, 5, 6)"],
    ),
    (
        "score_mod_returns_number",
        scores_mod(lambda s, q, k, h: 0.0),
        ArgumentTypeError,
        ["score_mod", "float", "(2, 4, 5, 6)"],
    ),
    (
        "score_mod_returns_bool",
        scores_mod(lambda s, q, k, h: s > 0),
        DTypeError,
        ["score_mod", "bool", "attn_mask"],
    ),
    (
        "alibi_zero_heads",
        lambda: score_mods.alibi(0),
        ParameterError,
        ["alibi", "num_heads", "got 0"],
    ),
    (
        "alibi_negative_heads",
        lambda: score_mods.alibi(-1),
        ParameterError,
        ["alibi", "num_heads", "got -1"],
    ),
    (
        "alibi_fractional_heads",
        lambda: score_mods.alibi(1.5),
        ParameterError,
        ["alibi", "num_heads", "1.5", "float"],
    ),
    (
        "alibi_bool_heads",
        lambda: score_mods.alibi(True),
        ParameterError,
        ["alibi", "num_heads", "True"],
    ),
    (
        "alibi_slopes_zero_heads",
        lambda: score_mods.alibi_slopes(0),
        ParameterError,
        ["alibi_slopes", "num_heads", "got 0"],
    ),
    (
        "alibi_3_slopes_for_4_heads",
        lambda: score_mods.alibi(4, slopes=[0.5, 0.25, 0.125]),
        ParameterError,
        ["slopes", "3 slopes", "num_heads=4"],
    ),
    (
        "alibi_nan_slope",
        lambda: score_mods.alibi(2, slopes=[0.5, float("nan")]),
        ParameterError,
        ["slopes", "finite"],
    ),
    ("softcap_zero", lambda: score_mods.softcap(0), ParameterError, ["softcap", "cap", "got 0"]),
    (
        "softcap_negative",
        lambda: score_mods.softcap(-2.0),
        ParameterError,
        ["softcap", "cap", "-2.0"],
    ),
    (
        "softcap_nan",
        lambda: score_mods.softcap(float("nan")),
        ParameterError,
        ["softcap", "cap", "nan"],
    ),
    ("softcap_bool", lambda: score_mods.softcap(True), ParameterError, ["softcap", "cap", "True"]),
]


# --- kv cache -------------------------------------------------------------------------------


def append_torch_into_numpy() -> Any:
    k, _, _ = torch_qkv((2, 4, 1, 2), (1, 1))
    return ak.append_kv(cache(), k, k)


def append_jax_into_numpy() -> Any:
    jnp = pytest.importorskip("jax.numpy")
    k = jnp.zeros((2, 4, 1, 2), dtype=jnp.float32)
    return ak.append_kv(ak.init_kv_cache((2,), 4, 8, 2, like=X.astype(np.float32)), k, k)


def append_numpy_into_torch() -> Any:
    k = randn(2, 4, 1, 2)
    return ak.append_kv(cache(like=torch_x(1).double()), k, k)


def append_on_other_device() -> Any:
    torch = pytest.importorskip("torch")
    k = torch.zeros(2, 4, 1, 2)
    return ak.append_kv(cache(like=torch.zeros(1)), k, torch.zeros(2, 4, 1, 2, device="meta"))


KV_CACHE_CASES: list[Case] = [
    (
        "append_kv_torch_into_numpy_cache",
        append_torch_into_numpy,
        NamespaceMismatchError,
        ["key", "torch.Tensor", "numpy.ndarray"],
    ),
    (
        "append_kv_jax_into_numpy_cache",
        append_jax_into_numpy,
        NamespaceMismatchError,
        ["key", "jax", "numpy.ndarray"],
    ),
    (
        "append_kv_numpy_into_torch_cache",
        append_numpy_into_torch,
        NamespaceMismatchError,
        ["key", "numpy.ndarray", "torch.Tensor"],
    ),
    (
        "append_kv_value_on_other_device",
        append_on_other_device,
        DeviceMismatchError,
        ["value", "meta", "cpu"],
    ),
    (
        "append_kv_value_not_an_array",
        lambda: ak.append_kv(cache(), randn(2, 4, 1, 2), [0.0]),
        ArgumentTypeError,
        ["value", "list"],
    ),
    (
        "append_kv_dtype",
        lambda: ak.append_kv(cache(), *[randn(2, 4, 1, 2).astype("f4")] * 2),
        DTypeError,
        ["key", "float32", "float64"],
    ),
    (
        "append_kv_heads",
        lambda: ak.append_kv(cache(), *[randn(2, 3, 1, 2)] * 2),
        ShapeError,
        ["key", "(2, 3, 1, 2)", "(2, 4)"],
    ),
    (
        "append_kv_rank_1",
        lambda: ak.append_kv(cache(), *[randn(2)] * 2),
        ShapeError,
        ["key", "(2,)"],
    ),
    (
        "append_kv_overflow",
        lambda: ak.append_kv(cache(), *[randn(2, 4, 9, 2)] * 2),
        ShapeError,
        ["kv cache holds 8 positions", "max_length"],
    ),
    (
        "init_kv_cache_like_list",
        lambda: ak.init_kv_cache((2,), 4, 8, 2, like=[1, 2]),
        ArgumentTypeError,
        ["like", "list"],
    ),
    (
        "init_kv_cache_like_int",
        lambda: ak.init_kv_cache((2,), 4, 8, 2, like=np.zeros(2, int)),
        DTypeError,
        ["like", "int64"],
    ),
    (
        "init_kv_cache_value_dim_0",
        lambda: ak.init_kv_cache((2,), 4, 8, 2, 0, like=X),
        ParameterError,
        ["value_dim", "0"],
    ),
    (
        "init_kv_cache_batch_shape_int",
        lambda: ak.init_kv_cache(2, 4, 8, 2, like=X),
        ParameterError,
        ["batch_shape", "got 2"],
    ),
]


# --- RoPE -----------------------------------------------------------------------------------


def rope_torch_float_positions() -> Any:
    torch = pytest.importorskip("torch")
    return ak.apply_rope(torch_x(2, 4, 8), torch.arange(4.0))


def rope_jax_float_positions() -> Any:
    jnp = pytest.importorskip("jax.numpy")
    return ak.apply_rope(jnp.zeros((2, 4, 8)), jnp.arange(4.0))


ROPE_CASES: list[Case] = [
    (
        "rope_float_offset",
        lambda: ak.apply_rope(randn(2, 4, 8), 1.5),
        ParameterError,
        ["positions", "1.5", "int(positions)"],
    ),
    (
        "rope_bool_offset",
        lambda: ak.apply_rope(randn(2, 4, 8), True),
        ParameterError,
        ["positions", "True"],
    ),
    (
        "rope_float_array",
        lambda: ak.apply_rope(randn(2, 4, 8), np.arange(4.0)),
        DTypeError,
        ["positions", "float64", "(4,)", "integer"],
    ),
    (
        "rope_float_0d_array",
        lambda: ak.apply_rope(randn(2, 4, 8), np.asarray(2.0)),
        DTypeError,
        ["positions", "float64"],
    ),
    (
        "rope_float_list",
        lambda: ak.apply_rope(randn(2, 4, 8), [0.5, 1, 2, 3]),
        DTypeError,
        ["positions", "float64"],
    ),
    (
        "rope_torch_float_positions",
        rope_torch_float_positions,
        DTypeError,
        ["positions", "float32"],
    ),
    ("rope_jax_float_positions", rope_jax_float_positions, DTypeError, ["positions", "float32"]),
]


# --- multi-head attention -------------------------------------------------------------------


def call_mha(x: Any = X, key: Any = None, value: Any = None, **kw: Any) -> Callable[[], Any]:
    return lambda: mha(x, key, value, params(), num_heads=4, **kw)


def mha_cache_from_numpy_with_torch_query() -> Any:
    torch = pytest.importorskip("torch")
    p = ak.MultiHeadParams(*(None if a is None else torch.from_numpy(a) for a in params()))
    return mha(torch.from_numpy(X), params=p, num_heads=4, cache=cache())


def nn_forward(x: Any = None, **kw: Any) -> Callable[[], Any]:
    def run() -> Any:
        q = torch_x(2, 5, 8) if x is None else x()
        return nn_module()(q, q, q, **kw)

    return run


def nn_decode(x: Callable[[], Any] | None = None, **kw: Any) -> Callable[[], Any]:
    def run() -> Any:
        module = nn_module()
        new = torch_x(2, 1, 8) if x is None else x()
        return module.decode(new, module.init_cache(2, 8), **kw)

    return run


def torch_int_mask(*shape: int) -> Callable[[], Any]:
    def make() -> Any:
        torch = pytest.importorskip("torch")
        return torch.zeros(*shape, dtype=torch.int64)

    return make


MULTI_HEAD_CASES: list[Case] = [
    (
        "mha_int_key_padding_mask",
        call_mha(key_padding_mask=np.ones((2, 5), int)),
        DTypeError,
        ["key_padding_mask", "int64", "(2, 5)", "!= 0"],
    ),
    (
        "mha_key_padding_mask_batch",
        call_mha(key_padding_mask=np.ones((3, 5), bool)),
        ShapeError,
        ["key_padding_mask", "(3, 5)", "(2, 5)"],
    ),
    (
        "mha_key_padding_mask_length",
        call_mha(key_padding_mask=np.ones((2, 4), bool)),
        ShapeError,
        ["key_padding_mask", "(2, 4)", "S=5"],
    ),
    (
        "mha_key_padding_mask_list",
        call_mha(key_padding_mask=[True] * 5),
        ArgumentTypeError,
        ["key_padding_mask", "list"],
    ),
    (
        "mha_attn_mask_shape_with_key_padding_mask",
        call_mha(attn_mask=np.ones((3, 3), bool), key_padding_mask=np.ones((2, 5), bool)),
        ShapeError,
        ["attn_mask", "(3, 3)", "(2, 4, 5, 5)"],
    ),
    (
        "mha_need_weights_yes",
        call_mha(need_weights="yes"),
        ParameterError,
        ["need_weights", "'yes'"],
    ),
    ("mha_need_weights_1", call_mha(need_weights=1), ParameterError, ["need_weights", "1"]),
    (
        "mha_average_weights_none",
        call_mha(need_weights=True, average_weights=None),
        ParameterError,
        ["average_weights", "None"],
    ),
    (
        "mha_is_causal_yes_with_cache",
        call_mha(is_causal="yes", cache=cache()),
        ParameterError,
        ["is_causal", "'yes'"],
    ),
    ("mha_add_zero_attn_0", call_mha(add_zero_attn=0), ParameterError, ["add_zero_attn", "0"]),
    (
        "mha_cross_key_with_cache",
        call_mha(key=randn(2, 3, 8), cache=cache()),
        ParameterError,
        ["kv cache holds self-attention keys", "key", "(2, 3, 8)", "key=None"],
    ),
    (
        "mha_cross_value_with_cache",
        call_mha(value=randn(2, 5, 8), cache=cache()),
        ParameterError,
        ["kv cache holds self-attention keys", "value", "(2, 5, 8)"],
    ),
    (
        "mha_query_width",
        call_mha(x=X[..., :7]),
        ShapeError,
        ["query has 7 features", "(2, 5, 7)", "d_model", "8"],
    ),
    (
        "mha_key_width",
        call_mha(key=randn(2, 3, 6)),
        ShapeError,
        ["key has 6 features", "(2, 3, 6)", "kdim", "8"],
    ),
    (
        "mha_value_width",
        call_mha(key=randn(2, 3, 8), value=randn(2, 3, 5)),
        ShapeError,
        ["value has 5 features", "(2, 3, 5)", "vdim", "8"],
    ),
    ("mha_positions_float", call_mha(positions=1.5), ParameterError, ["positions", "1.5"]),
    (
        "mha_kv_positions_float_array",
        call_mha(key=randn(2, 3, 8), rope=ak.Rope(), kv_positions=np.arange(3.0)),
        DTypeError,
        ["kv_positions", "float64"],
    ),
    (
        "mha_cache_batch",
        call_mha(cache=cache((3,))),
        ShapeError,
        ["cache.key", "(3,)", "(2,)", "batch_shape"],
    ),
    (
        "mha_cache_dtype",
        call_mha(cache=cache(like=X.astype(np.float32))),
        DTypeError,
        ["cache.key", "float32", "float64"],
    ),
    (
        "mha_numpy_cache_torch_query",
        mha_cache_from_numpy_with_torch_query,
        NamespaceMismatchError,
        ["cache.key", "numpy.ndarray", "torch.Tensor"],
    ),
    (
        "init_params_bias_no",
        lambda: ak.init_multi_head_params(8, 4, rng=np.random.default_rng(0), bias="no"),
        ParameterError,
        ["bias", "'no'"],
    ),
    (
        "nn_need_weights_yes",
        nn_forward(need_weights="yes"),
        ParameterError,
        ["need_weights", "'yes'"],
    ),
    (
        "nn_average_attn_weights_0",
        nn_forward(average_attn_weights=0),
        ParameterError,
        ["average_attn_weights", "0"],
    ),
    ("nn_is_causal_none", nn_forward(is_causal=None), ParameterError, ["is_causal", "None"]),
    (
        "nn_int_key_padding_mask",
        lambda: nn_forward(key_padding_mask=torch_int_mask(2, 5)())(),
        DTypeError,
        ["key_padding_mask", "int64", "True = padding"],
    ),
    (
        "nn_int_attn_mask",
        lambda: nn_forward(attn_mask=torch_int_mask(5, 5)())(),
        DTypeError,
        ["attn_mask", "int64"],
    ),
    (
        "nn_key_padding_mask_shape",
        lambda: nn_forward(key_padding_mask=torch_int_mask(2, 4)().bool())(),
        ShapeError,
        ["key_padding_mask", "(2, 4)", "(2, 5)"],
    ),
    (
        "nn_query_width",
        nn_forward(x=lambda: torch_x(2, 5, 7)),
        ShapeError,
        ["query has 7 features", "embed_dim=8", "(2, 5, 7)"],
    ),
    (
        "nn_decode_need_weights_str",
        nn_decode(need_weights="no"),
        ParameterError,
        ["need_weights", "'no'"],
    ),
    (
        "nn_decode_x_width",
        nn_decode(x=lambda: torch_x(2, 1, 6)),
        ShapeError,
        ["x has 6 features", "embed_dim=8", "(2, 1, 6)"],
    ),
]

CASES: list[Case] = SCORE_MOD_CASES + KV_CACHE_CASES + ROPE_CASES + MULTI_HEAD_CASES


# --- the core's cases (validation and masks; fixed by the core's own change) ----------------


def numpy_dense_with_torch() -> Any:
    q, k, v = torch_qkv((1, 2, 4, 8), (1, 2, 5, 8))
    return sdpa(q, k, v, attn_mask=masks.dense(np.ones((4, 5), bool)))


def with_mask(mask: Callable[[], Any], L: int = 4, S: int = 5, B: int = 1, **kw: Any) -> Any:
    return lambda: sdpa(*qkv((B, 2, L, 8), (B, 2, S, 8)), attn_mask=mask(), **kw)


def plain(**kw: Any) -> Callable[[], Any]:
    return lambda: sdpa(*qkv((1, 2, 4, 8), (1, 2, 5, 8)), **kw)


def layout(**kw: Any) -> Callable[[], Any]:
    # (B, L, H, E) inputs: q L=16 H=4, k and v S=12 H=2; read as (..., H, L, E) the
    # leading dims (2, 16) and (2, 12) do not broadcast.
    return lambda: sdpa(*qkv((2, 16, 4, 8), (2, 12, 2, 8)), **kw)


CORE_CASES: list[Case] = [
    (
        "dense_numpy_mask_with_torch_inputs",
        numpy_dense_with_torch,
        NamespaceMismatchError,
        ["attn_mask", "numpy", "torch"],
    ),
    (
        "dense_wrong_shape",
        with_mask(lambda: masks.dense(np.ones((3, 3), bool))),
        ShapeError,
        ["attn_mask", "(3, 3)"],
    ),
    (
        "dense_float_array",
        lambda: masks.dense(np.zeros((4, 5))),
        DTypeError,
        ["masks.dense", "float64", "attn_mask"],
    ),
    (
        "segments_ids_too_short",
        with_mask(lambda: masks.segments(np.zeros(3, int)), S=4),
        ShapeError,
        ["q_ids", "(3,)"],
    ),
    (
        "segments_ids_too_long",
        with_mask(lambda: masks.segments(np.zeros(6, int)), S=4),
        ShapeError,
        ["q_ids", "(6,)"],
    ),
    (
        "segments_kv_ids_wrong_length",
        with_mask(lambda: masks.segments(np.zeros(4, int), np.zeros(3, int))),
        ShapeError,
        ["kv_ids", "(3,)"],
    ),
    (
        "key_padding_lengths_exceed_keys",
        with_mask(lambda: masks.key_padding([512, 300]), L=8, S=256, B=2),
        ParameterError,
        ["key_padding", "512", "256"],
    ),
    (
        "documents_do_not_sum_to_length",
        with_mask(lambda: masks.documents([100, 412]), L=256, S=256),
        ParameterError,
        ["documents", "512", "256"],
    ),
    (
        "bigbird_block_size_0",
        lambda: masks.bigbird(64, block_size=0),
        ParameterError,
        ["block_size", "0"],
    ),
    ("return_weights_no", plain(return_weights="no"), ParameterError, ["return_weights", "'no'"]),
    ("return_lse_none", plain(return_lse=None), ParameterError, ["return_lse", "None"]),
    ("enable_gqa_yes", plain(enable_gqa="yes"), ParameterError, ["enable_gqa", "'yes'"]),
    ("enable_gqa_0", plain(enable_gqa=0), ParameterError, ["enable_gqa", "0"]),
    ("bhle_layout", layout(), ShapeError, ["(..., H, L, E)", "transpose(1, 2)", "swapaxes"]),
    (
        "bhle_layout_gqa",
        layout(enable_gqa=True),
        ShapeError,
        ["(..., H, L, E)", "transpose(1, 2)", "swapaxes"],
    ),
    (
        "longdouble_inputs",
        lambda: sdpa(*(a.astype(np.longdouble) for a in qkv((1, 2, 4, 8), (1, 2, 5, 8)))),
        DTypeError,
        ["query", "float64"],
    ),
    (
        "gqa_key_8_value_4_heads",
        lambda: sdpa(*qkv((1, 8, 4, 8), (1, 8, 5, 8), (1, 4, 5, 8)), enable_gqa=True),
        ShapeError,
        ["key", "value", "8", "4"],
    ),
    (
        "documents_negative_q_offset",
        with_mask(lambda: masks.documents([4, 4]), L=8, S=8, q_offset=-1),
        ParameterError,
        ["q_offset", "-1"],
    ),
    (
        "documents_negative_kv_offset",
        with_mask(lambda: masks.documents([4, 4]), L=8, S=8, kv_offset=-2),
        ParameterError,
        ["kv_offset", "-2"],
    ),
    (
        "block_sparse_negative_q_offset",
        with_mask(
            lambda: masks.block_sparse([[True, False], [True, True]], 4), L=8, S=8, q_offset=-1
        ),
        ParameterError,
        ["q_offset", "-1"],
    ),
    (
        "block_sparse_negative_kv_offset",
        with_mask(
            lambda: masks.block_sparse([[True, False], [True, True]], 4), L=8, S=8, kv_offset=-3
        ),
        ParameterError,
        ["kv_offset", "-3"],
    ),
]


@pytest.mark.parametrize(
    ("call", "expected", "facts"),
    [pytest.param(call, exc, facts, id=name) for name, call, exc, facts in CASES + CORE_CASES],
)
def test_bad_input_raises_attnkit_error_naming_it(
    call: Callable[[], Any], expected: type[AttnkitError], facts: list[str]
) -> None:
    with pytest.raises(AttnkitError) as info:
        call()
    error, message = info.value, str(info.value)
    assert isinstance(error, expected), (
        f"{type(error).__name__}, not {expected.__name__}: {message}"
    )
    missing = [fact for fact in facts if fact not in message]
    assert not missing, f"{missing} missing from the message: {message}"


def test_documents_given_a_traced_array_names_segments() -> None:
    """masks.documents under jax.jit given an array (its lengths or per-position ids) has
    no value to lay the documents out by: an attnkit error naming masks.segments, not
    JAX's ConcretizationTypeError; a per-position id array given eagerly is refused too
    (an id of 0 is no length), with the same pointer."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    x = jnp.ones((1, 1, 8, 4))

    def call(x: Any, ids: Any) -> Any:
        return sdpa(x, x, x, attn_mask=masks.documents(ids))

    with pytest.raises(ParameterError) as info:
        jax.jit(call)(x, jnp.asarray([4, 4]))
    message = str(info.value)
    for fact in ("masks.documents", "traced array", "(2,)", "masks.segments"):
        assert fact in message, f"{fact!r} missing from: {message}"
    with pytest.raises(ParameterError, match=r"masks\.segments"):
        masks.documents(jnp.asarray([0, 0, 1, 1]))
    assert repr(masks.documents(jnp.asarray([4, 4]))) == "masks.documents([4, 4])"


def test_case_ids_are_unique() -> None:
    names = [case[0] for case in CASES + CORE_CASES]
    assert len(names) == len(set(names))
