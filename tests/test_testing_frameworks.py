"""The frameworks table of attnkit.testing is the one source: the README's comparison table
is exactly what it makes, its conventions are names the kit knows, its words are the
reports', and the behaviours it states in words hold for the installed releases.

(That each framework follows exactly the conventions the table gives it is checked by
``conformance/test_kit.py`` on the torch and jax backends, with ``check_attention``.)
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import attnkit as ak
from attnkit.errors import ShapeError
from attnkit.testing import oracle as ref
from attnkit.testing.conventions import CONVENTIONS, check_declared
from attnkit.testing.detect import Finding
from attnkit.testing.frameworks import ATTNKIT, FRAMEWORKS, by_key, describe, followers
from attnkit.testing.frameworks_table import CELLS, ROWS, markdown_table

README = Path(__file__).parents[1] / "README.md"


def test_the_readme_table_is_made_from_the_frameworks_table() -> None:
    table = markdown_table()
    assert table in README.read_text(), (
        "README.md's 'Where attnkit differs from the frameworks' table is not what "
        "attnkit.testing.frameworks_table.markdown_table() makes; paste this:\n" + table
    )
    lines = table.splitlines()
    assert len(lines) == len(ROWS) + 2
    assert all(line.count("|") == len(FRAMEWORKS) + 3 for line in lines)


def test_the_table_names_only_what_the_kit_knows() -> None:
    keys = [f.key for f in (ATTNKIT, *FRAMEWORKS)]
    assert len(set(keys)) == len(keys)
    for f in (ATTNKIT, *FRAMEWORKS):
        check_declared(f.conventions, f"{f.key} conventions")  # raises on a bad name
        assert set(f.supports) <= set(ATTNKIT.supports), f.key
        assert set(f.behaviours) <= {row for row, _ in ROWS}, f.key
    for convention, cells in CELLS.items():
        assert set(cells) == {v.name for v in CONVENTIONS[convention].variants}, convention
    assert ATTNKIT.conventions == {}  # attnkit's choices are the defaults


def test_words_name_the_followers() -> None:
    assert followers("empty_rows", "mean") == ["jax.nn.dot_product_attention", by_key("keras").name]
    words = describe(Finding("mask_polarity", "true_masks"))
    assert words == (
        "in a bool mask True means masked (may not attend): the convention of "
        "torch.nn.MultiheadAttention"
    )
    assert describe(Finding(ignored="window")).startswith("it ignores window")


def test_verify_knows_every_framework_of_the_table() -> None:
    from attnkit.app.verify.frameworks import FRAMEWORKS as VERIFIED

    assert {f.key for f in VERIFIED} == {f.key for f in FRAMEWORKS}


# --- the behaviours the table states in words -------------------------------------------


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def test_attnkit_gqa_with_key_heads_not_value_heads() -> None:
    rng = _rng()
    q = rng.standard_normal((1, 4, 3, 8))
    k1, v2 = rng.standard_normal((1, 1, 5, 8)), rng.standard_normal((1, 2, 5, 8))
    out = ak.scaled_dot_product_attention(q, k1, v2, enable_gqa=True)  # one-head key
    want = ref.attention(q, np.repeat(k1, 4, axis=-3), np.repeat(v2, 2, axis=-3)).out
    np.testing.assert_allclose(out, want, atol=1e-13)
    with pytest.raises(ShapeError, match="give value the key's heads"):
        ak.scaled_dot_product_attention(q, v2, rng.standard_normal((1, 4, 5, 8)), enable_gqa=True)


def test_torch_sdpa_behaviours() -> None:
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    rng = _rng(1)
    q, k, v = (torch.from_numpy(rng.standard_normal((1, 2, n, 8))) for n in (4, 6, 6))
    keep = torch.from_numpy(rng.random((4, 6)) < 0.7)
    causal = torch.ones(4, 6, dtype=torch.bool).tril()
    both = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, is_causal=True)  # E = Ev
    torch.testing.assert_close(
        both, F.scaled_dot_product_attention(q, k, v, attn_mask=keep & causal)
    )
    with pytest.raises(RuntimeError, match="Explicit attn_mask should not be set"):
        F.scaled_dot_product_attention(q, k, v[..., :3], attn_mask=keep, is_causal=True)
    # GQA with key heads != value heads: each repeated to Hq
    q4, k2, v1 = (
        torch.from_numpy(rng.standard_normal((1, h, n, 8))) for h, n in ((4, 3), (2, 5), (1, 5))
    )
    out = F.scaled_dot_product_attention(q4, k2, v1, enable_gqa=True)
    want = ref.attention(q4.numpy(), np.repeat(k2.numpy(), 2, -3), np.repeat(v1.numpy(), 4, -3))
    np.testing.assert_allclose(out.numpy(), want.out, atol=1e-13)


def test_flex_attention_refuses_key_heads_not_value_heads() -> None:
    pytest.importorskip("torch")
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    q, k, v = torch.randn(1, 4, 3, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 1, 5, 8)
    with warnings.catch_warnings(), pytest.raises(RuntimeError):
        warnings.simplefilter("ignore")
        flex_attention(q, k, v, enable_gqa=True)


def test_jax_nn_behaviours() -> None:
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    q, k = jnp.ones((1, 3, 2, 8)), jnp.ones((1, 5, 2, 8))
    with pytest.raises(ValueError, match="value shape should be"):
        jax.nn.dot_product_attention(q, k, jnp.ones((1, 5, 2, 6)))  # Ev != E
    with pytest.raises(ValueError, match="value shape should be"):
        jax.nn.dot_product_attention(jnp.ones((1, 3, 4, 8)), k, jnp.ones((1, 5, 1, 8)))
    if jax.devices()[0].platform == "cpu":  # float16 under jit on CPU
        half = jnp.ones((1, 3, 2, 8), jnp.float16)
        with pytest.raises(ValueError, match="F16_F16_F32"):
            jax.jit(jax.nn.dot_product_attention)(half, half, half).block_until_ready()


def test_keras_returns_float64_as_float32() -> None:
    pytest.importorskip("jax")
    from attnkit.testing import peers_jax

    if not peers_jax.keras_available():
        pytest.skip("Keras 3 on the JAX backend is not installed")
    import jax

    from attnkit.testing.arrays_jax import float64_enabled

    with float64_enabled():
        x = jax.numpy.ones((1, 3, 2, 8), jax.numpy.float64)
        out = peers_jax._keras_ops().dot_product_attention(x, x, x)
    assert out.dtype == jax.numpy.float32
