"""The executor's block size (attnkit.blocked.cost.choose_block_size) and the costs
backends declare to it."""

from __future__ import annotations

import numpy as np
import pytest
from _helpers import problem

from attnkit import backends
from attnkit.blocked import cost


def test_jax_blocks_are_sized_for_its_dispatch_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    """JAX declares a larger fixed cost per block (block_overhead_elements: each block is
    its own XLA operations under jit), so a window's blocks are larger there than with
    the default cost; the result does not depend on it."""
    jax = pytest.importorskip("jax")
    jax_backend = backends.load("jax")
    assert jax_backend.block_overhead_elements > cost.BLOCK_OVERHEAD_ELEMENTS
    x = jax.numpy.asarray(np.random.default_rng().standard_normal((1, 8, 8192, 64)), "float32")
    p = problem(x, x, x, window=(128, 128))
    jax_rows = cost.choose_block_size(p, (1, 8))
    monkeypatch.setattr(jax_backend, "block_overhead_elements", None)
    default_rows = cost.choose_block_size(p, (1, 8))
    assert (jax_rows, default_rows) == (128, 64), (jax_rows, default_rows)
