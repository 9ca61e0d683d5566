"""The executor's block size (attnkit.dense.choose_block_size) and the costs backends
declare to it."""

from __future__ import annotations

import numpy as np
import pytest

from attnkit import backends, dense


def test_jax_blocks_are_sized_for_its_dispatch_cost() -> None:
    """JAX declares a larger fixed cost per block (block_overhead_elements: each block is
    its own XLA operations under jit), so a window's blocks are larger there than with
    the default cost; the result does not depend on it."""
    jax = pytest.importorskip("jax")
    from attnkit import attention
    from attnkit._validate import prepare

    assert backends.load("jax").block_overhead_elements > dense.BLOCK_OVERHEAD_ELEMENTS
    x = jax.numpy.asarray(np.random.default_rng().standard_normal((1, 8, 8192, 64)), "float32")
    p = prepare(x, x, x, None, 0.0, False, None, False, "top_left", (128, 128), 0, 0, None, "auto")
    jax_rows = dense.choose_block_size(p, (1, 8))
    kernel = attention._kernel
    try:
        attention._kernel = lambda xp, name: (
            None if name == "block_overhead_elements" else (kernel(xp, name))
        )
        default_rows = dense.choose_block_size(p, (1, 8))
    finally:
        attention._kernel = kernel
    assert (jax_rows, default_rows) == (128, 64), (jax_rows, default_rows)
