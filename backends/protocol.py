"""The backend protocol, in two halves, so that a reader of the math sees only its own.

:class:`MathBackend` (declared by the math, :mod:`attnkit.backend_protocol`, re-exported
here) is what the math asks of the backend of its inputs' namespace. :class:`ToolBackend`
is what the application and the tests ask besides (installing, NumPy conversions,
timing, seeding). :class:`Backend`, both, is what each framework subclasses.
"""

from __future__ import annotations

import importlib
from typing import Any

from attnkit.backend_protocol import BlockTasks, Kernels, MathBackend
from attnkit.errors import ArgumentTypeError
from attnkit.shapes import type_name

__all__ = ["Backend", "BlockTasks", "Kernels", "MathBackend", "ToolBackend"]


class ToolBackend:
    """What the application and the tests call besides: none of it reaches the math.

    Attributes:
        NAME: the backend's name, for tables and messages.
        MODULE: the framework's import name (``available()`` tries it).
        install_hint: the pip command that installs the framework.

    Methods:
        available(): whether the framework imports.
        from_numpy(a, dtype, device=None): a NumPy array (or nested lists) as this
            backend's array of ``dtype`` (a dtype name such as ``"float32"``).
        to_numpy(x): this backend's array as a NumPy array.
        synchronize(x): wait until ``x`` is computed (for timing).
        make_rng(seed): a new generator of this backend (what ``check_rng`` takes).
    """

    NAME: str = "generic"
    MODULE: str = ""
    install_hint: str = ""

    def available(self) -> bool:
        if not self.MODULE:
            return True
        try:
            importlib.import_module(self.MODULE)
        except ImportError:
            return False
        return True

    def from_numpy(self, a: Any, dtype: str, device: Any = None) -> Any:
        raise NotImplementedError(f"the {self.NAME} backend cannot convert NumPy arrays")

    def to_numpy(self, x: Any) -> Any:
        import numpy as np

        return np.asarray(x)

    def synchronize(self, x: Any) -> None:
        return None

    def make_rng(self, seed: int) -> Any:
        raise NotImplementedError(f"the {self.NAME} backend has no random numbers")


class Backend(MathBackend, ToolBackend):
    """One array library's whole adapter: :class:`MathBackend`, what the math calls, and
    :class:`ToolBackend`, what the tools call. Each framework subclasses this."""

    def check_rng(self, rng: Any, like: Any = None) -> None:
        from attnkit.backends import NAMES  # the package's own list (imports this module)

        raise ArgumentTypeError(
            f"attnkit has no random numbers for {type_name(like)} arrays (no backend adapter "
            f"for their namespace; supported: {', '.join(NAMES)}): dropout needs one."
        )

    def __repr__(self) -> str:
        return f"<attnkit backend {self.NAME}>"
