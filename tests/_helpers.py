"""Helpers shared by the unit tests."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

__all__ = ["x64"]


@contextlib.contextmanager
def x64(jax: Any) -> Iterator[None]:
    """JAX with float64 enabled inside the block, restored afterwards."""
    enable = getattr(jax, "enable_x64", None)
    if enable is not None:
        with enable(True):
            yield
        return
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", previous)
