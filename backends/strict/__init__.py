"""The array-api-strict backend: dropout draws from a ``numpy.random.Generator``.

array-api-strict has no random numbers; the keep mask is drawn with NumPy and moved to
the inputs' device, so device mix-ups still surface.
"""

from __future__ import annotations

from typing import Any

from attnkit.errors import ArgumentTypeError
from attnkit.shapes import type_name

from .. import Backend

__all__ = ["BACKEND", "StrictBackend"]


class StrictBackend(Backend):
    NAME = "strict"
    MODULE = "array_api_strict"
    NAMESPACE = "array_api_strict"
    install_hint = 'pip install "attnkit[strict]"  (or: pip install array-api-strict)'

    def from_numpy(self, a: Any, dtype: str, device: Any = None) -> Any:
        import array_api_strict as xp
        import numpy as np

        return xp.asarray(np.asarray(a, dtype=dtype), device=device)

    def to_numpy(self, x: Any) -> Any:
        import array_api_strict as xp
        import numpy as np

        return np.asarray(x.to_device(xp.Device("CPU_DEVICE")))

    def check_rng(self, rng: Any, like: Any = None) -> None:
        import numpy as np

        if not isinstance(rng, np.random.Generator):
            raise ArgumentTypeError(
                "rng must be a numpy.random.Generator for array-api-strict arrays, got "
                f"{type_name(rng)}; create one with numpy.random.default_rng(seed)."
            )

    def make_rng(self, seed: int) -> Any:
        import numpy as np

        return np.random.default_rng(seed)

    def dropout_keep(
        self, rng: Any, shape: tuple[int, ...], keep_prob: float, *, like: Any, stream: int
    ) -> Any:
        import array_api_strict as xp

        keep = rng.random(shape, dtype="float32") < keep_prob
        return xp.asarray(keep, device=like.device)

    def normal(self, rng: Any, shape: tuple[int, ...], *, dtype: Any, device: Any = None) -> Any:
        """Standard normal draws of ``shape``, drawn with NumPy in float64 (as the NumPy
        backend draws them, so both give the same numbers for the same seed)."""
        import array_api_strict as xp

        return xp.asarray(rng.standard_normal(shape), dtype=dtype, device=device)

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
        """Uniform draws on ``[low, high)`` of ``shape``, drawn with NumPy in float64."""
        import array_api_strict as xp

        return xp.asarray(rng.uniform(low, high, shape), dtype=dtype, device=device)

    def split_rng(self, rng: Any, n: int) -> list[Any]:
        """``n`` independent generators spawned from ``rng`` (``Generator.spawn``)."""
        return list(rng.spawn(n))


BACKEND = StrictBackend()
