"""Every bad input raises the documented exception, before any work, with the facts in its message.

Each case asserts the exception class (attnkit's own, which also subclasses the builtin a
caller expects) and the key facts of the message: the argument, the shapes or values
involved, and the hint that fixes it. An autouse fixture replaces both executors with a
function that fails the test, so an error raised only after work started is caught too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import attnkit as ak
from attnkit import (
    AttnkitError,
    DeviceMismatchError,
    DTypeError,
    NamespaceMismatchError,
    ParameterError,
    ShapeError,
)

sdpa = ak.scaled_dot_product_attention


def randn(seed: int, *shape: int) -> np.ndarray:
    """Fresh random normal float64 data (never zeros)."""
    return np.random.default_rng(seed).standard_normal(shape)


def qkv(
    q_shape: tuple[int, ...],
    k_shape: tuple[int, ...],
    v_shape: tuple[int, ...] | None = None,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    v_shape = k_shape if v_shape is None else v_shape
    return randn(seed, *q_shape), randn(seed + 1, *k_shape), randn(seed + 2, *v_shape)


def check(exc: type[BaseException], fn: Callable[[], Any], *facts: str) -> BaseException:
    """``fn()`` raises ``exc`` whose message contains every fact (literal substrings)."""
    with pytest.raises(exc, match=re.escape(facts[0])) as info:
        fn()
    message = str(info.value)
    for fact in facts[1:]:
        assert fact in message, f"{fact!r} missing from the message: {message}"
    return info.value


class ExecutorReached(AssertionError):
    pass


@pytest.fixture(autouse=True)
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Errors must be raised before any work: reaching an executor fails the test."""

    def reached(*args: Any, **kwargs: Any) -> Any:
        raise ExecutorReached("an executor ran before the bad input was rejected")

    monkeypatch.setattr("attnkit._dispatch.attend", reached)


def test_hierarchy() -> None:
    for cls in (ShapeError, DTypeError, NamespaceMismatchError, DeviceMismatchError):
        assert issubclass(cls, AttnkitError)
    assert issubclass(ParameterError, AttnkitError)
    assert issubclass(ShapeError, ValueError)
    assert issubclass(DeviceMismatchError, ValueError)
    assert issubclass(ParameterError, ValueError)
    assert issubclass(DTypeError, TypeError)
    assert issubclass(NamespaceMismatchError, TypeError)


def test_no_work_fixture_is_armed() -> None:
    q, k, v = qkv((2, 3, 4), (2, 5, 4))
    with pytest.raises(ExecutorReached):
        sdpa(q, k, v)


# --- shapes ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["query", "key", "value"])
def test_rank_below_two(name: str) -> None:
    arrays = dict(zip(("query", "key", "value"), qkv((1, 4, 8), (1, 4, 8)), strict=True))
    arrays[name] = randn(7, 8)  # rank 1
    check(
        ShapeError,
        lambda: sdpa(arrays["query"], arrays["key"], arrays["value"]),
        f"{name} must have rank >= 2",
        "(8,)",
        f"{name}[None, :]",
    )


def test_rank_zero_query() -> None:
    _, k, v = qkv((4, 8), (4, 8))
    check(
        ShapeError,
        lambda: sdpa(np.asarray(randn(3, 1)[0]), k, v),
        "query must have rank >= 2",
        "()",
    )


def test_feature_mismatch_message_matches_design() -> None:
    q, k, v = qkv((1, 1, 4, 8), (1, 1, 4, 9), (1, 1, 4, 8))
    check(
        ShapeError,
        lambda: sdpa(q, k, v),
        "key has 9 features on its last axis but query has 8: query (1, 1, 4, 8), key (1, 1, 4, 9)",
        "value (1, 1, 4, 8)",
    )


def test_value_features_may_differ() -> None:
    # Ev != E is allowed: the no-work fixture is reached, not a ShapeError.
    q, k, v = qkv((1, 4, 8), (1, 5, 8), (1, 5, 3))
    with pytest.raises(ExecutorReached):
        sdpa(q, k, v)


def test_key_value_length_mismatch() -> None:
    q, k, v = qkv((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 6, 8))
    check(
        ShapeError,
        lambda: sdpa(q, k, v),
        "value has length 6 on axis -2 but key has 5",
        "query (2, 3, 4, 8), key (2, 3, 5, 8), value (2, 3, 6, 8)",
        "same S",
    )


def test_leading_dims_do_not_broadcast() -> None:
    q, k, v = qkv((2, 3, 4, 8), (5, 3, 6, 8))
    check(
        ShapeError,
        lambda: sdpa(q, k, v),
        "do not broadcast",
        "query (2, 3, 4, 8), key (5, 3, 6, 8), value (5, 3, 6, 8)",
        "equal or 1",
    )


def test_batch_dims_do_not_broadcast_with_gqa() -> None:
    q, k, v = qkv((2, 6, 4, 8), (3, 2, 5, 8))
    check(
        ShapeError,
        lambda: sdpa(q, k, v, enable_gqa=True),
        "batch dims",
        "do not broadcast",
        "query (2, 6, 4, 8), key (3, 2, 5, 8), value (3, 2, 5, 8)",
    )


def test_gqa_heads_not_divisible() -> None:
    q, k, v = qkv((2, 6, 4, 8), (2, 4, 5, 8))
    check(
        ShapeError,
        lambda: sdpa(q, k, v, enable_gqa=True),
        "Hq=6 and Hkv=4",
        "divisible",
        "query (2, 6, 4, 8), key (2, 4, 5, 8)",
        "divisors of Hq",
    )


def test_gqa_key_value_heads_differ() -> None:
    q, k, v = qkv((2, 6, 4, 8), (2, 3, 5, 8), (2, 2, 5, 8))
    check(
        ShapeError,
        lambda: sdpa(q, k, v, enable_gqa=True),
        "Hkv=3 and value 2",
        "value (2, 2, 5, 8)",
    )


def test_heads_differ_without_enable_gqa_hints_at_it() -> None:
    q, k, v = qkv((2, 6, 4, 8), (2, 3, 5, 8))
    check(
        ShapeError,
        lambda: sdpa(q, k, v),
        "Hq=6",
        "Hkv=3",
        "enable_gqa=True",
        "query (2, 6, 4, 8), key (2, 3, 5, 8)",
    )


@pytest.mark.parametrize(
    "mask_shape",
    [(3, 5), (4, 3), (7,), (3, 6, 4, 5), (2, 2, 4, 5), (1, 2, 6, 1, 1)],
    ids=str,
)
def test_mask_does_not_broadcast(mask_shape: tuple[int, ...]) -> None:
    q, k, v = qkv((2, 6, 4, 8), (2, 6, 5, 8))
    mask = randn(9, *mask_shape) > 0
    check(
        ShapeError,
        lambda: sdpa(q, k, v, attn_mask=mask),
        f"attn_mask of shape {mask_shape}",
        "(..., Hq, L, S) = (2, 6, 4, 5)",
    )


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8])
def test_integer_mask(dtype: Any) -> None:
    q, k, v = qkv((2, 4, 8), (2, 5, 8))
    mask = (randn(3, 4, 5) > 0).astype(dtype)
    name = np.dtype(dtype).name
    check(
        DTypeError,
        lambda: sdpa(q, k, v, attn_mask=mask),
        f"attn_mask has dtype {name}",
        "(4, 5)",
        "bool",
        "attn_mask != 0",
    )


def test_torch_uint8_mask() -> None:
    torch = pytest.importorskip("torch")
    q, k, v = (torch.from_numpy(a) for a in qkv((2, 4, 8), (2, 5, 8)))
    mask = torch.from_numpy(randn(3, 4, 5) > 0).to(torch.uint8)
    check(DTypeError, lambda: sdpa(q, k, v, attn_mask=mask), "attn_mask", "uint8", "(4, 5)")


# --- dtypes ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["query", "key", "value"])
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.complex128, np.complex64, np.bool_])
def test_non_real_floating_inputs(name: str, dtype: Any) -> None:
    arrays = dict(zip(("query", "key", "value"), qkv((2, 4, 8), (2, 5, 8)), strict=True))
    bad = arrays[name]
    bad = (bad > 0) if dtype is np.bool_ else (bad * 10).astype(dtype)
    arrays[name] = bad
    check(
        DTypeError,
        lambda: sdpa(arrays["query"], arrays["key"], arrays["value"]),
        f"{name} has dtype {np.dtype(dtype).name}",
        "real floating",
        f"{name}.astype(",
    )


@pytest.mark.parametrize("name", ["key", "value"])
def test_mixed_float_dtypes(name: str) -> None:
    arrays = dict(zip(("query", "key", "value"), qkv((2, 4, 8), (2, 5, 8)), strict=True))
    arrays[name] = arrays[name].astype(np.float32)
    check(
        DTypeError,
        lambda: sdpa(arrays["query"], arrays["key"], arrays["value"]),
        f"{name} is float32",
        "query is float64",
        f"cast {name} to float64",
    )


def test_mixed_dtypes_torch() -> None:
    torch = pytest.importorskip("torch")
    q, k, v = (torch.from_numpy(a) for a in qkv((2, 4, 8), (2, 5, 8)))
    check(
        DTypeError,
        lambda: sdpa(q.float(), k, v),
        "key is float64 (2, 5, 8) but query is float32 (2, 4, 8)",
    )


# --- namespaces and devices --------------------------------------------------------------


def test_numpy_query_torch_key() -> None:
    torch = pytest.importorskip("torch")
    q, k, v = qkv((2, 4, 8), (2, 5, 8))
    check(
        NamespaceMismatchError,
        lambda: sdpa(q, torch.from_numpy(k), v),
        "key comes from torch.Tensor but query from numpy.ndarray",
        "convert key",
    )


def test_torch_query_numpy_mask() -> None:
    torch = pytest.importorskip("torch")
    q, k, v = (torch.from_numpy(a) for a in qkv((2, 4, 8), (2, 5, 8)))
    mask = randn(4, 4, 5) > 0
    check(
        NamespaceMismatchError,
        lambda: sdpa(q, k, v, attn_mask=mask),
        "attn_mask comes from numpy.ndarray but query from torch.Tensor",
    )


def test_numpy_query_strict_value() -> None:
    xps = pytest.importorskip("array_api_strict")
    q, k, v = qkv((2, 4, 8), (2, 5, 8))
    check(
        NamespaceMismatchError,
        lambda: sdpa(q, k, xps.asarray(v)),
        "value comes from array_api_strict",
        "query from numpy.ndarray",
    )


def test_strict_query_numpy_key() -> None:
    xps = pytest.importorskip("array_api_strict")
    q, k, v = qkv((2, 4, 8), (2, 5, 8))
    check(
        NamespaceMismatchError,
        lambda: sdpa(xps.asarray(q), k, xps.asarray(v)),
        "key comes from numpy.ndarray but query from array_api_strict",
    )


def test_numpy_query_jax_key() -> None:
    jnp = pytest.importorskip("jax.numpy")
    q, k, v = qkv((2, 4, 8), (2, 5, 8))
    check(NamespaceMismatchError, lambda: sdpa(q, jnp.asarray(k), v), "key comes from jax")


@pytest.mark.parametrize("name", ["key", "value", "attn_mask"])
def test_strict_device_mismatch(name: str) -> None:
    xps = pytest.importorskip("array_api_strict")
    other = xps.Device("device1")
    q, k, v = qkv((2, 4, 8), (2, 5, 8))
    arrays = {
        "query": xps.asarray(q),
        "key": xps.asarray(k),
        "value": xps.asarray(v),
        "attn_mask": xps.asarray(randn(5, 4, 5) > 0),
    }
    arrays[name] = xps.asarray(arrays[name], device=other)
    check(
        DeviceMismatchError,
        lambda: sdpa(
            arrays["query"], arrays["key"], arrays["value"], attn_mask=arrays["attn_mask"]
        ),
        f"{name} is on device",
        "device1",
        "CPU_DEVICE",
        f"move {name}",
    )


def test_torch_meta_device_mismatch() -> None:
    torch = pytest.importorskip("torch")
    q, k, v = (torch.from_numpy(a) for a in qkv((2, 4, 8), (2, 5, 8)))
    check(
        DeviceMismatchError,
        lambda: sdpa(q, k.to("meta"), v),
        "key is on device meta but query is on cpu",
    )


# --- scalar parameters -------------------------------------------------------------------


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5, True, "0.1", None, math.nan], ids=repr)
def test_bad_dropout_p(p: Any) -> None:
    q, k, v = qkv((2, 4, 8), (2, 5, 8))
    check(
        ParameterError,
        lambda: sdpa(q, k, v, dropout_p=p, rng=np.random.default_rng(0)),
        "dropout_p must be a float in [0, 1)",
        f"got {p!r}",
        "0.0 to disable",
    )


def test_dropout_without_rng() -> None:
    q, k, v = qkv((2, 4, 8), (2, 5, 8))
    check(
        ParameterError,
        lambda: sdpa(q, k, v, dropout_p=0.25),
        "dropout_p=0.25 needs an explicit rng",
        "numpy.random.default_rng(seed)",
        "torch.Generator().manual_seed(seed)",
        "jax.random.key(seed)",
    )


def _arrays(backend: str) -> tuple[Any, Any, Any]:
    q, k, v = qkv((2, 4, 8), (2, 5, 8))
    if backend == "numpy":
        return q, k, v
    if backend == "torch":
        torch = pytest.importorskip("torch")
        return torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v)
    if backend == "jax":
        jnp = pytest.importorskip("jax.numpy")
        return jnp.asarray(q), jnp.asarray(k), jnp.asarray(v)
    xps = pytest.importorskip("array_api_strict")
    return xps.asarray(q), xps.asarray(k), xps.asarray(v)


def _rng(kind: str) -> Any:
    if kind == "numpy":
        return np.random.default_rng(0)
    if kind == "torch":
        return pytest.importorskip("torch").Generator().manual_seed(0)
    if kind == "jax":
        return pytest.importorskip("jax").random.key(0)
    if kind == "jax-split":
        jax = pytest.importorskip("jax")
        return jax.random.split(jax.random.key(0), 2)
    if kind == "int":
        return 0
    raise AssertionError(kind)


WRONG_RNG = [
    # (backend, wrong rng, the expected kind named in the message, the hint)
    ("numpy", "torch", "numpy.random.Generator", "numpy.random.default_rng(seed)"),
    ("numpy", "jax", "numpy.random.Generator", "numpy.random.default_rng(seed)"),
    ("numpy", "int", "numpy.random.Generator", "numpy.random.default_rng(seed)"),
    ("torch", "numpy", "torch.Generator", ".manual_seed(seed)"),
    ("torch", "jax", "torch.Generator", ".manual_seed(seed)"),
    ("jax", "numpy", "JAX PRNG key", "jax.random.key(seed)"),
    ("jax", "torch", "JAX PRNG key", "jax.random.key(seed)"),
    ("jax", "jax-split", "single JAX PRNG key", "jax.random.key(seed)"),
    ("strict", "torch", "numpy.random.Generator", "numpy.random.default_rng(seed)"),
    ("strict", "jax", "numpy.random.Generator", "numpy.random.default_rng(seed)"),
]


@pytest.mark.parametrize(("backend", "kind", "expected", "hint"), WRONG_RNG)
def test_wrong_rng_type(backend: str, kind: str, expected: str, hint: str) -> None:
    q, k, v = _arrays(backend)
    rng = _rng(kind)
    error = check(TypeError, lambda: sdpa(q, k, v, dropout_p=0.2, rng=rng), "rng must be", hint)
    message = str(error)
    assert expected in message, message
    assert type(rng).__name__ in message, message  # what was given


def test_wrong_rng_shape_is_named() -> None:
    q, k, v = _arrays("jax")
    check(TypeError, lambda: sdpa(q, k, v, dropout_p=0.2, rng=_rng("jax-split")), "shape (2,)")


def test_wrong_rng_ignored_without_dropout() -> None:
    # dropout_p = 0 never looks at rng: validation passes and the executor is reached.
    q, k, v = qkv((2, 4, 8), (2, 5, 8))
    with pytest.raises(ExecutorReached):
        sdpa(q, k, v, dropout_p=0.0, rng="not a generator")


@pytest.mark.parametrize(("backend", "kind"), [("numpy", "torch"), ("jax", "numpy")])
def test_wrong_rng_type_is_attnkit_error(backend: str, kind: str) -> None:
    q, k, v = _arrays(backend)
    rng = _rng(kind)
    with pytest.raises(AttnkitError):
        sdpa(q, k, v, dropout_p=0.2, rng=rng)


def test_wrong_rng_message_names_its_library() -> None:
    q, k, v = _arrays("numpy")
    check(TypeError, lambda: sdpa(q, k, v, dropout_p=0.2, rng=_rng("torch")), "torch")


def _cuda_torch() -> Any:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device: a CPU torch.Generator with CUDA tensors")
    return torch


def test_torch_rng_on_other_device() -> None:
    torch = _cuda_torch()
    q, k, v = (torch.from_numpy(a).cuda() for a in qkv((2, 4, 8), (2, 5, 8)))
    check(
        DeviceMismatchError,
        lambda: sdpa(q, k, v, dropout_p=0.2, rng=torch.Generator().manual_seed(0)),
        "rng",
        "cuda",
    )


@pytest.mark.parametrize("impl", ["fast", "Generic", None, 0])
def test_unknown_impl(impl: Any) -> None:
    q, k, v = qkv((2, 4, 8), (2, 5, 8))
    check(
        ParameterError,
        lambda: sdpa(q, k, v, impl=impl),
        f"got {impl!r}",
        "impl must be one of",
        "'auto'",
        "'generic'",
        "'reference'",
    )


@pytest.mark.parametrize("alignment", ["center", "bottom-right", "TOP_LEFT", None])
def test_unknown_causal_alignment(alignment: Any) -> None:
    q, k, v = qkv((2, 4, 8), (2, 5, 8))
    check(
        ParameterError,
        lambda: sdpa(q, k, v, is_causal=True, causal_alignment=alignment),
        f"got {alignment!r}",
        "'top_left'",
        "'bottom_right'",
    )


def test_non_bool_is_causal() -> None:
    q, k, v = qkv((2, 4, 8), (2, 5, 8))
    check(ParameterError, lambda: sdpa(q, k, v, is_causal=1), "is_causal", "got 1")


@pytest.mark.parametrize(
    ("window", "facts"),
    [
        (-1, ["window left side", "got -1", "pass None"]),
        ((2, -3), ["window right side", "got -3", "window=(2, -3)"]),
        (1.5, ["window must be None, an int W", "got 1.5"]),
        ((1.0, 2), ["window left side", "got 1.0"]),
        ((1, 2, 3), ["window must be None", "got (1, 2, 3)", "(left, right)"]),
        ((4,), ["window must be None", "got (4,)"]),
        (True, ["window must be None", "got True"]),
        ("3", ["window must be None", "got '3'"]),
    ],
    ids=repr,
)
def test_bad_window(window: Any, facts: list[str]) -> None:
    q, k, v = qkv((2, 4, 8), (2, 5, 8))
    check(ParameterError, lambda: sdpa(q, k, v, window=window), *facts)


@pytest.mark.parametrize("name", ["q_offset", "kv_offset"])
@pytest.mark.parametrize("value", [1.0, 2.5, "3", None, True], ids=repr)
def test_non_int_offsets(name: str, value: Any) -> None:
    q, k, v = qkv((2, 4, 8), (2, 5, 8))
    check(
        ParameterError,
        lambda: sdpa(q, k, v, is_causal=True, **{name: value}),
        f"{name} must be a Python int",
        f"{type(value).__name__} {value!r}",
        f"int({name})",
    )


@pytest.mark.parametrize("scale", [math.nan, math.inf, -math.inf, "0.5", True, [0.5]], ids=repr)
def test_bad_scale(scale: Any) -> None:
    q, k, v = qkv((2, 4, 8), (2, 5, 8))
    check(
        ParameterError,
        lambda: sdpa(q, k, v, scale=scale),
        "scale must be None (1/sqrt(E)) or a finite real number",
        f"got {scale!r}",
    )


@pytest.mark.parametrize("kwargs", ["scale", "dropout_p"])
def test_numpy_float32_scalars_accepted(kwargs: str) -> None:
    q, k, v = qkv((2, 4, 8), (2, 5, 8))
    if kwargs == "scale":
        extra: dict[str, Any] = {"scale": np.float32(0.125)}
    else:
        extra = {"dropout_p": np.float32(0.25), "rng": np.random.default_rng(0)}
    with pytest.raises(ExecutorReached):  # validation passes, the executor is reached
        sdpa(q, k, v, **extra)


@pytest.mark.parametrize("block_size", [0, -4, 2.0, True, "16"], ids=repr)
def test_bad_block_size(block_size: Any) -> None:
    q, k, v = qkv((2, 4, 8), (2, 5, 8))
    check(
        ParameterError,
        lambda: sdpa(q, k, v, block_size=block_size),
        "block_size must be a positive int or None",
        f"got {block_size!r}",
    )


# --- non-array inputs --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["query", "key", "value", "attn_mask"])
def test_python_list_input(name: str) -> None:
    q, k, v = qkv((4, 8), (5, 8))
    arrays = {"query": q, "key": k, "value": v, "attn_mask": randn(3, 4, 5) > 0}
    arrays[name] = arrays[name].tolist()
    check(
        TypeError,
        lambda: sdpa(
            arrays["query"], arrays["key"], arrays["value"], attn_mask=arrays["attn_mask"]
        ),
        f"{name} must be an array",
        "got list",
        f"numpy.asarray({name})",
    )


def test_python_list_input_is_attnkit_error() -> None:
    q, k, v = qkv((4, 8), (5, 8))
    with pytest.raises(AttnkitError):
        sdpa(q.tolist(), k, v)


# --- merge_partials ----------------------------------------------------------------------


def pieces(n: int, seed: int = 0, lead: tuple[int, ...] = (2, 3)) -> tuple[list, list]:
    outs = [randn(seed + i, *lead, 4, 5) for i in range(n)]
    lses = [randn(seed + 10 + i, *lead, 4) for i in range(n)]
    return outs, lses


def test_merge_empty() -> None:
    check(
        ShapeError,
        lambda: ak.merge_partials([], []),
        "at least one piece",
        "got 0 outputs and 0 lses",
    )


def test_merge_length_mismatch() -> None:
    outs, lses = pieces(3)
    check(
        ShapeError,
        lambda: ak.merge_partials(outs, lses[:2]),
        "one lse per output",
        "got 3 outputs and 2 lses",
    )


def test_merge_output_shape_mismatch() -> None:
    outs, lses = pieces(3)
    outs[2] = randn(5, 2, 3, 6, 5)
    check(
        ShapeError,
        lambda: ak.merge_partials(outs, lses),
        "outs[2] has shape (2, 3, 6, 5) but outs[0] has (2, 3, 4, 5)",
    )


@pytest.mark.parametrize("bad", [(2, 3, 5), (2, 3, 4, 5), (3, 4), (2, 3, 4, 1)], ids=str)
def test_merge_lse_shape_mismatch(bad: tuple[int, ...]) -> None:
    outs, lses = pieces(2)
    lses[1] = randn(6, *bad)
    check(
        ShapeError,
        lambda: ak.merge_partials(outs, lses),
        f"lses[1] has shape {bad}",
        "(2, 3, 4)",
    )


def test_merge_zero_dim_piece_message() -> None:
    error = check(
        ShapeError,
        lambda: ak.merge_partials([np.asarray(randn(1, 1)[0])], [np.asarray(randn(2, 1)[0])]),
        "outs[0]",
    )
    assert "has shape () but outs[0] has ()" not in str(error), str(error)


def test_merge_mixed_namespaces_torch() -> None:
    torch = pytest.importorskip("torch")
    outs, lses = pieces(2)
    outs[1] = torch.from_numpy(outs[1])
    check(
        NamespaceMismatchError,
        lambda: ak.merge_partials(outs, lses),
        "outs[1] is a torch.Tensor but outs[0] a numpy.ndarray",
    )


def test_merge_mixed_namespaces_lse_strict() -> None:
    xps = pytest.importorskip("array_api_strict")
    outs, lses = pieces(2)
    lses[0] = xps.asarray(lses[0])
    check(
        NamespaceMismatchError,
        lambda: ak.merge_partials(outs, lses),
        "lses[0] is a array_api_strict",
        "outs[0] a numpy.ndarray",
    )


def test_merge_integer_dtype() -> None:
    outs, lses = pieces(2)
    lses[1] = (lses[1] * 10).astype(np.int64)
    check(DTypeError, lambda: ak.merge_partials(outs, lses), "lses[1] has dtype int64")


def test_merge_not_sequences() -> None:
    outs, lses = pieces(2)
    check(
        TypeError,
        lambda: ak.merge_partials(np.stack(outs), np.stack(lses)),
        "two sequences",
        "got numpy.ndarray and numpy.ndarray",
    )


def test_merge_non_array_piece_names_it() -> None:
    outs, lses = pieces(2)
    outs[0] = outs[0].tolist()
    check(TypeError, lambda: ak.merge_partials(outs, lses), "outs[0]")


@pytest.mark.parametrize("case", ["ndarray", "list-piece"])
def test_merge_type_errors_are_attnkit_errors(case: str) -> None:
    outs, lses = pieces(2)
    if case == "ndarray":
        args = (np.stack(outs), np.stack(lses))
    else:
        args = ([outs[0].tolist(), outs[1]], lses)
    with pytest.raises(AttnkitError):
        ak.merge_partials(*args)


# --- other backends give the same messages -----------------------------------------------


@pytest.mark.parametrize("backend", ["torch", "jax", "strict"])
def test_feature_mismatch_other_backends(backend: str) -> None:
    q, _, v = _arrays(backend)
    k = _arrays(backend)[1][..., :7]
    check(
        ShapeError,
        lambda: sdpa(q, k, v),
        "key has 7 features on its last axis but query has 8: query (2, 4, 8), key (2, 5, 7)",
    )


@pytest.mark.parametrize("backend", ["torch", "jax", "strict"])
def test_integer_input_other_backends(backend: str) -> None:
    q, k, v = _arrays(backend)
    if backend == "torch":
        bad = (q * 10).to(pytest.importorskip("torch").int64)
    elif backend == "jax":
        bad = (q * 10).astype("int32")
    else:
        xps = pytest.importorskip("array_api_strict")
        bad = xps.astype(q * 10, xps.int32)
    check(DTypeError, lambda: sdpa(bad, k, v), "query has dtype", "int", "real floating")
