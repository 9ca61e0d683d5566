"""NumPy adapter: dropout draws from a ``numpy.random.Generator``."""

from __future__ import annotations

from typing import Any

from attnkit.errors import ArgumentTypeError
from attnkit.shapes import type_name as _kind

__all__ = [
    "NAME",
    "available",
    "block_attention",
    "check_rng",
    "dropout_keep",
    "from_numpy",
    "install_hint",
    "make_rng",
    "namespace",
    "normal",
    "split_rng",
    "synchronize",
    "to_numpy",
    "uniform",
]

NAME = "numpy"
install_hint = "pip install numpy"


def available() -> bool:
    try:
        import numpy  # noqa: F401
    except ImportError:
        return False
    return True


def check_rng(rng: Any, like: Any = None) -> None:
    """Raise unless ``rng`` is a generator this backend can draw from for ``like``."""
    import numpy as np

    if not isinstance(rng, np.random.Generator):
        raise ArgumentTypeError(
            f"rng must be a numpy.random.Generator for NumPy arrays, got {_kind(rng)}; "
            "create one with numpy.random.default_rng(seed)."
        )


def dropout_keep(rng: Any, shape: tuple[int, ...], keep_prob: float, *, like: Any, stream: int):
    # float32 uniforms halve the memory of the draw; a stateful Generator ignores stream.
    return rng.random(shape, dtype="float32") < keep_prob


def from_numpy(a: Any, dtype: str) -> Any:
    import numpy as np

    return np.asarray(a).astype(dtype)


def to_numpy(x: Any) -> Any:
    import numpy as np

    return np.asarray(x)


def make_rng(seed: int) -> Any:
    import numpy as np

    return np.random.default_rng(seed)


def synchronize(x: Any) -> None:
    return None


def normal(rng: Any, shape: tuple[int, ...], *, dtype: Any, device: Any = None) -> Any:
    """Standard normal draws of ``shape`` (drawn in float64, then cast to ``dtype``)."""
    return rng.standard_normal(shape).astype(dtype)


def uniform(
    rng: Any, shape: tuple[int, ...], low: float, high: float, *, dtype: Any, device: Any = None
) -> Any:
    """Uniform draws on ``[low, high)`` of ``shape`` (float64, then cast to ``dtype``)."""
    return rng.uniform(low, high, shape).astype(dtype)


def split_rng(rng: Any, n: int) -> list[Any]:
    """``n`` independent generators spawned from ``rng`` (``Generator.spawn``)."""
    return list(rng.spawn(n))


def namespace() -> Any:
    """The array-API namespace of this backend (``array_api_compat.numpy``)."""
    import array_api_compat.numpy as xp

    return xp


def block_attention(
    q: Any, k: Any, v: Any, mask: Any, scale: float, shift_free: bool = False
) -> Any:
    """One block of attnkit's generic executor, head by head in a reused buffer
    (:mod:`attnkit.backends.numpy.fused`); None where it does not apply."""
    from .fused import block_attention as block

    return block(q, k, v, mask, scale, shift_free)


def _held_scores(rows: int, width: int, heads: int) -> int:
    from .fused import held_scores

    return held_scores(rows, width, heads)


#: masked scores are replaced, never added to: NaN or inf there cannot leak
block_attention.masks_nonfinite = True  # type: ignore[attr-defined]
#: the executor decides the shift-free bound for this kernel (it reads ``shift_free``)
block_attention.uses_shift_free = True  # type: ignore[attr-defined]
#: its fixed cost per head of a block (about 8 NumPy calls, 15 us) in score elements of
#: work (about 1.5 ns each), for the executor's choice of block size
block_attention.overhead_per_head_elements = 10_000  # type: ignore[attr-defined]
#: score elements it holds at once for a block, for the executor's memory budget (it
#: computes a head's slice of rows at a time, one per thread)
block_attention.held_scores = _held_scores  # type: ignore[attr-defined]
