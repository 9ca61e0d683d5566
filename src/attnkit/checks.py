"""Checks of plain (non-array) arguments shared by every public function.

Each raises :class:`attnkit.errors.ParameterError` naming the argument, the value
received and the fix, before any work.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

from .errors import ParameterError

__all__ = [
    "ALIGNMENTS",
    "check_alignment",
    "check_choice",
    "check_dropout_p",
    "check_flag",
    "check_int",
    "check_positive_int",
    "check_scale",
    "is_int",
    "is_real",
]

#: Where the causal diagonal sits when L != S.
ALIGNMENTS = ("top_left", "bottom_right")


def is_int(value: Any) -> bool:
    """A Python or NumPy integer, not a bool."""
    # type() first: the ABC isinstance check costs about a microsecond per call.
    return type(value) is int or (
        isinstance(value, numbers.Integral) and not isinstance(value, bool)
    )


def is_real(value: Any) -> bool:
    """A real number (int or float, Python or NumPy), not a bool."""
    return type(value) in (float, int) or (
        isinstance(value, numbers.Real) and not isinstance(value, bool)
    )


def check_flag(name: str, value: Any) -> bool:
    """A boolean argument must be True or False: "no", 0 or None are refused, not read by
    truthiness."""
    if type(value) is not bool:
        raise ParameterError(
            f"{name} must be True or False, got {value!r} ({type(value).__name__}); pass a "
            f"bool (e.g. {name}=bool(...))."
        )
    return value


def check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    """A string argument that must be one of ``choices`` (``how="mean"``, say)."""
    if not isinstance(value, str) or value not in choices:
        raise ParameterError(
            f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}."
        )
    return value


def check_int(name: str, value: Any) -> int:
    """An absolute position (q_offset, kv_offset): a Python int."""
    if not is_int(value):
        raise ParameterError(
            f"{name} must be a Python int (an absolute position), got {type(value).__name__} "
            f"{value!r}; positions are static, pass int({name})."
        )
    return int(value)


def check_positive_int(name: str, value: Any, fix: str) -> int:
    """``value`` as an int >= 1, or a ParameterError naming ``name`` and ``fix``."""
    if not is_int(value) or value < 1:
        raise ParameterError(f"{name} must be a positive int, got {value!r}; {fix}.")
    return int(value)


def check_alignment(alignment: Any, name: str = "causal_alignment") -> str:
    if alignment not in ALIGNMENTS:
        raise ParameterError(
            f"{name} must be 'top_left' (PyTorch: query i sees keys 0..i) or "
            f"'bottom_right' (FlashAttention: the last query sees the last key), "
            f"got {alignment!r}."
        )
    return alignment


def check_dropout_p(dropout_p: Any) -> float:
    if not is_real(dropout_p) or not 0.0 <= dropout_p < 1.0:
        raise ParameterError(
            f"dropout_p must be a float in [0, 1), got {dropout_p!r}; use 0.0 to disable "
            "dropout (for example at evaluation time)."
        )
    return float(dropout_p)


def check_scale(scale: Any, E: int) -> float:
    """The scores' scale: None means 1/sqrt(E); else a finite real (negative or tiny too)."""
    if scale is None:
        return 1.0 / math.sqrt(E) if E > 0 else 1.0
    if not is_real(scale) or not math.isfinite(scale):
        raise ParameterError(
            f"scale must be None (1/sqrt(E)) or a finite real number, got {scale!r}."
        )
    return float(scale)
