"""The NumPy backend: dropout draws from a ``numpy.random.Generator``; a per-block kernel
that computes each head's block in one reused buffer per thread (:mod:`.kernel`)."""

from __future__ import annotations

from typing import Any

from attnkit.errors import ArgumentTypeError
from attnkit.shapes import type_name

from .. import Backend, Kernels
from .kernel import block_attention, block_tasks

__all__ = ["BACKEND", "NumpyBackend"]

#: The kernel's fixed cost per head of a block (about 8 NumPy calls, 15 us) in score
#: elements of work (about 1.5 ns each), for the executor's choice of block size.
OVERHEAD_PER_HEAD_ELEMENTS = 10_000


class NumpyBackend(Backend):
    NAME = "numpy"
    MODULE = "numpy"
    NAMESPACE = "array_api_compat.numpy"
    install_hint = "pip install numpy"
    kernels = Kernels(
        block=block_attention,
        block_masks_nonfinite=True,  # masked scores are replaced, never added to
        block_reads_shift_free=True,
        block_overhead_per_head=OVERHEAD_PER_HEAD_ELEMENTS,
        block_tasks=block_tasks,  # one task's slice of rows per thread
    )

    def from_numpy(self, a: Any, dtype: str, device: Any = None) -> Any:
        import numpy as np

        return np.asarray(a).astype(dtype)

    def check_rng(self, rng: Any, like: Any = None) -> None:
        import numpy as np

        if not isinstance(rng, np.random.Generator):
            raise ArgumentTypeError(
                f"rng must be a numpy.random.Generator for NumPy arrays, got {type_name(rng)}; "
                "create one with numpy.random.default_rng(seed)."
            )

    def make_rng(self, seed: int) -> Any:
        import numpy as np

        return np.random.default_rng(seed)

    def dropout_keep(
        self, rng: Any, shape: tuple[int, ...], keep_prob: float, *, like: Any, stream: int
    ) -> Any:
        # float32 uniforms halve the memory of the draw; a stateful Generator ignores stream
        return rng.random(shape, dtype="float32") < keep_prob

    def normal(self, rng: Any, shape: tuple[int, ...], *, dtype: Any, device: Any = None) -> Any:
        """Standard normal draws of ``shape`` (drawn in float64, then cast to ``dtype``)."""
        return rng.standard_normal(shape).astype(dtype)

    def uniform(
        self,
        rng: Any,
        shape: tuple[int, ...],
        low: float,
        high: float,
        *,
        dtype: Any,
        device: Any = None,
    ) -> Any:
        """Uniform draws on ``[low, high)`` of ``shape`` (float64, then cast to ``dtype``)."""
        return rng.uniform(low, high, shape).astype(dtype)

    def split_rng(self, rng: Any, n: int) -> list[Any]:
        """``n`` independent generators spawned from ``rng`` (``Generator.spawn``)."""
        return list(rng.spawn(n))


BACKEND = NumpyBackend()
