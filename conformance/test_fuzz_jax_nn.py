"""Differential fuzzing of attnkit's jax.nn drop-in
(``attnkit.backends.jax.dot_product_attention``) against ``jax.nn.dot_product_attention``
itself on legal argument combinations (issue 26, item 8): bias and bool mask of every
rank 0..4 with broadcast axes, causal, windows, query and key lengths, GQA, scale,
float32 and float16 (a float32 bias on float16 inputs among them). Rows with a key to
attend equal jax.nn's; rows with none are 0 here (jax.nn: the mean of the values, or 0
beyond query_seq_lengths). The bugs issue 26 found are its ``@example`` cases."""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, note, settings

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from attnkit.backends.jax import dot_product_attention  # noqa: E402


@pytest.fixture(autouse=True)
def _jax_session_only(request: pytest.FixtureRequest) -> None:
    """The jax.nn drop-in is fuzzed once, in the jax conformance session
    (``--backend=jax``; its eager ``--sample`` run leaves it to the ``--jit`` run, see
    ``conftest.JAX_SAME_EITHER_WAY``); the other sessions skip it."""
    if request.config.getoption("--backend") != "jax":
        pytest.skip("the jax.nn drop-in is fuzzed in the jax session (--backend=jax)")


TOL = {"float32": 2e-5, "float16": 2e-2}  # O(1) outputs: a few roundings of each dtype
# Each example runs its own shapes eagerly (several seconds of compiling on a CPU), so a run
# draws a few derandomized examples beside the @example regressions.


@st.composite
def calls(draw: Any) -> dict[str, Any]:
    """One legal jax.nn call, as plain data (shapes, flags, a seed)."""
    B, T, S = draw(st.integers(1, 2)), draw(st.integers(1, 7)), draw(st.integers(1, 9))
    K, G = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    full = (B, K * G, T, S)  # (B, N, T, S)

    def broadcast_shape() -> tuple[int, ...]:
        rank = draw(st.integers(0, 4))
        return tuple(n if draw(st.booleans()) else 1 for n in full[4 - rank :])

    window = draw(st.one_of(st.none(), st.tuples(st.integers(0, 3), st.integers(0, 3))))
    return {
        "B": B, "T": T, "S": S, "K": K, "G": G, "H": draw(st.sampled_from([4, 8])),
        "dtype": draw(st.sampled_from(["float32", "float16"])),
        "bias": draw(st.booleans()) and broadcast_shape(),
        "bias_scale": draw(st.sampled_from([1.0, 1e9])),
        "mask": draw(st.booleans()) and broadcast_shape(),
        "is_causal": draw(st.booleans()),
        "window": window,
        "q_len": draw(st.booleans()),
        "kv_len": draw(st.booleans()),
        "scale": draw(st.one_of(st.none(), st.floats(0.05, 2.0))),
        "seed": draw(st.integers(0, 2**16)),
    }  # fmt: skip


def _arrays(c: dict[str, Any]) -> tuple[Any, dict[str, Any], np.ndarray]:
    """(q, k, v), the call's keyword arguments, and the (B, N, T, S) bool of the keys
    each row may attend (mask, causal, window, lengths; the bias never empties a row)."""
    rng = np.random.default_rng(c["seed"])
    B, T, S, K, G, H = (c[n] for n in "B T S K G H".split())
    N, dt = K * G, jnp.dtype(c["dtype"])
    qkv = [jnp.asarray(rng.standard_normal(s), dt) for s in ((B, T, N, H), (B, S, K, H),
                                                            (B, S, K, H))]  # fmt: skip
    kw: dict[str, Any] = {"is_causal": c["is_causal"], "scale": c["scale"]}
    keep = np.ones((B, N, T, S), bool)
    t, j = np.arange(T)[:, None], np.arange(S)[None, :]
    if c["bias"] is not False:
        bias = rng.standard_normal(c["bias"]) * (rng.random(c["bias"]) < 0.5) * c["bias_scale"]
        kw["bias"] = jnp.asarray(-np.abs(bias), jnp.float32)  # a float32 bias, any input dtype
    if c["mask"] is not False:
        m = rng.random(c["mask"]) > 0.3
        kw["mask"], keep = jnp.asarray(m), keep & m
    if c["is_causal"]:
        keep &= j <= t
    if c["window"] is not None:
        kw["local_window_size"] = c["window"]
        keep &= (j >= t - c["window"][0]) & (j <= t + c["window"][1])
    if c["q_len"]:
        n = rng.integers(1, T + 1, size=B).astype(np.int32)
        kw["query_seq_lengths"] = jnp.asarray(n)
        keep &= (np.arange(T)[None, :] < n[:, None])[:, None, :, None]
    if c["kv_len"]:
        n = rng.integers(1, S + 1, size=B).astype(np.int32)
        kw["key_value_seq_lengths"] = jnp.asarray(n)
        keep &= (np.arange(S)[None, :] < n[:, None])[:, None, None, :]
    return qkv, kw, keep


BASE = {"B": 2, "T": 6, "S": 9, "K": 2, "G": 2, "H": 8, "bias": False, "bias_scale": 1.0,
        "mask": False, "is_causal": False, "window": None, "q_len": False, "kv_len": False,
        "scale": None, "seed": 1}  # fmt: skip


@settings(max_examples=6, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(calls())
# issue 26: a float32 -1e9 bias on float16 inputs became -inf (rows came back 0)
@example({**BASE, "dtype": "float16", "bias": (2, 4, 6, 9), "bias_scale": 1e9})
# issue 26: 2-D and 3-D masks and biases were refused (jax.nn adds leading axes)
@example({**BASE, "dtype": "float32", "mask": (6, 9), "bias": (4, 1, 9)})
def test_fuzz_jax_nn_drop_in(c: dict[str, Any]) -> None:
    note(repr(c))
    (q, k, v), kw, keep = _arrays(c)
    got = np.asarray(dot_product_attention(q, k, v, **kw), np.float64)  # (B, T, N, H)
    theirs = np.asarray(jax.nn.dot_product_attention(q, k, v, **kw), np.float64)
    live = keep.any(-1).transpose(0, 2, 1)[..., None]  # (B, T, N, 1)
    assert not np.isnan(got).any(), "NaN in attnkit's output"
    err = float(np.abs(np.where(live, got - theirs, 0)).max(initial=0))
    tol = TOL[c["dtype"]]
    assert err <= tol, f"rows with keys: |attnkit - jax.nn| = {err:.2e} > {tol}"
    assert np.all(np.where(live, 0, got) == 0), "a row with no key is not 0"
