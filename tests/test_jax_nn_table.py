"""The table of differences between ``jax.nn.dot_product_attention`` and attnkit's
drop-in, in :mod:`attnkit.backends.jax.nn`'s docstring, checked row by row against jax.nn
itself (issue 26): every row of the table has a check here, every check a row, and each
check runs both functions."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from attnkit.backends.jax import dot_product_attention  # noqa: E402
from attnkit.backends.jax.nn import _mask  # noqa: E402

import attnkit as ak  # noqa: E402
from attnkit.app.bench.peers_jax import float64_enabled  # noqa: E402

HEADER = "| | `jax.nn.dot_product_attention` | attnkit's drop-in |"
# jax.nn fills masked scores with the dtype's large negative (-0.7 * float32 max), so a
# row with nothing left has a finite residual near it: "about -2.4e38" in the table.
LARGE_NEGATIVE = -0.7 * float(np.finfo(np.float32).max)


def readme_rows() -> dict[str, tuple[str, str]]:
    """The table's rows: first cell -> (jax.nn's cell, attnkit's cell)."""
    lines = (importlib.import_module("attnkit.backends.jax.nn").__doc__ or "").splitlines()
    start = lines.index(HEADER) + 2  # skip the |---| line
    rows = {}
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = (cells[1], cells[2])
    return rows


def inputs(seed: int, dtype: Any = jnp.float32, H: int = 8, Hv: int = 8) -> tuple:
    rng = np.random.default_rng(seed)
    q = jnp.asarray(rng.standard_normal((2, 6, 4, H)), dtype)  # (B, T, N, H)
    k = jnp.asarray(rng.standard_normal((2, 9, 2, H)), dtype)  # (B, S, K, H)
    v = jnp.asarray(rng.standard_normal((2, 9, 2, Hv)), dtype)  # (B, S, K, Hv)
    return q, k, v


def oracle64(q: Any, k: Any, v: Any) -> np.ndarray:
    """float64 softmax(q k^T / sqrt(H)) v in (B, T, N, H) layout, GQA by repeat."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    g = q.shape[2] // k.shape[2]
    k, v = np.repeat(k, g, axis=2), np.repeat(v, g, axis=2)
    s = np.einsum("btnh,bsnh->bnts", q, k) / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bnts,bsnh->btnh", p / p.sum(-1, keepdims=True), v)


def no_key_row() -> None:
    q, k, v = inputs(1)
    mask = jnp.ones((1, 1, 6, 9), bool).at[:, :, 2].set(False)  # row 2 sees nothing
    out, lse = jax.nn.dot_product_attention(q, k, v, mask=mask, return_residual=True)
    mean = jnp.repeat(v.mean(axis=1), 2, axis=1)  # (B, N, H): GQA heads repeated
    assert float(jnp.abs(out[:, 2] - mean).max()) <= 1e-5, "jax.nn: the mean of the values"
    assert bool(jnp.all((lse[:, 2] < 0.99 * LARGE_NEGATIVE) & jnp.isfinite(lse[:, 2])))
    out, lse = dot_product_attention(q, k, v, mask=mask, return_residual=True)
    assert float(jnp.abs(out[:, 2]).max()) == 0.0 and bool(jnp.all(lse[:, 2] == -jnp.inf))
    window = dot_product_attention(q, k[:, :3], v[:, :3], local_window_size=(0, 0))
    theirs = jax.nn.dot_product_attention(q, k[:, :3], v[:, :3], local_window_size=(0, 0))
    assert float(jnp.abs(window[:, 3:]).max()) == 0.0  # rows 3..5 have no key in the window
    assert float(jnp.abs(theirs[:, 3:] - jnp.repeat(v[:, :3].mean(1), 2, 1)[:, None]).max()) <= 1e-5


def query_padding_row() -> None:
    q, k, v = inputs(2)
    lengths = jnp.array([6, 3], jnp.int32)
    out, lse = jax.nn.dot_product_attention(
        q, k, v, query_seq_lengths=lengths, return_residual=True
    )
    assert float(jnp.abs(out[1, 3:]).max()) == 0.0, "jax.nn zeroes query-padding rows"
    assert bool(jnp.all((lse[1, 3:] < 0.99 * LARGE_NEGATIVE) & jnp.isfinite(lse[1, 3:])))
    out, lse = dot_product_attention(q, k, v, query_seq_lengths=lengths, return_residual=True)
    assert float(jnp.abs(out[1, 3:]).max()) == 0.0 and bool(jnp.all(lse[1, 3:] == -jnp.inf))


def float64_row() -> None:
    with float64_enabled():
        q, k, v = inputs(3, jnp.float64)
        want = oracle64(q, k, v)
        theirs = float(np.abs(np.asarray(jax.nn.dot_product_attention(q, k, v)) - want).max())
        ours = float(np.abs(np.asarray(dot_product_attention(q, k, v)) - want).max())
    assert 1e-10 < theirs < 1e-5, f"jax.nn's float64 error {theirs:.1e}: not float32-like"
    assert ours <= 1e-14, f"attnkit's float64 error {ours:.1e}"


def value_head_size_row() -> None:
    q, k, v = inputs(4, Hv=5)
    with pytest.raises(ValueError, match="value"):
        jax.nn.dot_product_attention(q, k, v)
    out = dot_product_attention(q, k, v)
    assert out.shape == (2, 6, 4, 5)
    assert float(np.abs(np.asarray(out) - oracle64(q, k, v)).max()) <= 2e-6


def poison_row() -> None:
    q, k, v = inputs(5)
    v = v.at[:, 5:].set(jnp.nan)  # values beyond the lengths: masked
    lengths = jnp.array([5, 5], jnp.int32)
    theirs = jax.nn.dot_product_attention(q, k, v, key_value_seq_lengths=lengths)
    assert bool(jnp.isnan(theirs).any()), "jax.nn: NaN in masked values reaches the output"
    ours = dot_product_attention(q, k, v, key_value_seq_lengths=lengths)
    assert bool(jnp.isfinite(ours).all())


def cudnn_row() -> None:
    q, k, v = inputs(6)
    with pytest.raises(ak.ParameterError, match="cudnn"):
        dot_product_attention(q, k, v, implementation="cudnn")
    if jax.default_backend() != "gpu":
        return  # jax.nn's cuDNN kernel exists only on NVIDIA GPUs
    got = jax.nn.dot_product_attention(q, k, v, implementation="cudnn")
    assert float(jnp.abs(got - dot_product_attention(q, k, v)).max()) <= 1e-2


def key_padding_row() -> None:
    q, k, v = inputs(7)
    lengths = jnp.array([9, 4], jnp.int32)
    qc, kc = jnp.swapaxes(q, 1, 2), jnp.swapaxes(k, 1, 2)  # (B, N, T, H), (B, K, S, H)
    assert isinstance(_mask(None, None, None, lengths, qc, kc, True), ak.masks.Mask)
    got = dot_product_attention(q, k, v, key_value_seq_lengths=lengths)
    want = jax.nn.dot_product_attention(q, k, v, key_value_seq_lengths=lengths)
    assert float(jnp.abs(got - want).max()) <= 2e-6


CHECKS: dict[str, Callable[[], None]] = {
    "a row with no key to attend (a window or mask leaving nothing)": no_key_row,
    "a query row beyond `query_seq_lengths`": query_padding_row,
    "float64 inputs (`jax_enable_x64`)": float64_row,
    "value head size": value_head_size_row,
    "NaN or inf in masked keys or values": poison_row,
    '`implementation="cudnn"`': cudnn_row,
    "keys beyond `key_value_seq_lengths` alone": key_padding_row,
}


def test_every_row_of_the_table_has_a_check() -> None:
    assert sorted(readme_rows()) == sorted(CHECKS)


@pytest.mark.parametrize("row", list(CHECKS))
def test_the_row_holds_against_jax_nn(row: str) -> None:
    CHECKS[row]()
