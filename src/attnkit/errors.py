"""Exceptions raised by attnkit.

Every error is raised at the public boundary, before any work, naming the argument, its
shape or dtype, what was expected and the fix. Each class subclasses ``ValueError`` or
``TypeError``, and :class:`AttnkitError` catches them all.
"""

from __future__ import annotations

__all__ = [
    "ArgumentTypeError",
    "AttnkitError",
    "AttnkitWarning",
    "DTypeError",
    "DeviceMismatchError",
    "NamespaceMismatchError",
    "ParameterError",
    "ShapeError",
]


class AttnkitError(Exception):
    """Base class of every exception attnkit raises on bad input."""


class ShapeError(AttnkitError, ValueError):
    """An array has the wrong rank or a size that does not match or broadcast."""


class DTypeError(AttnkitError, TypeError):
    """An array has a dtype attention cannot use (integer, complex, mixed)."""


class NamespaceMismatchError(AttnkitError, TypeError):
    """Arrays from different array libraries (for example NumPy and PyTorch) were mixed."""


class DeviceMismatchError(AttnkitError, ValueError):
    """Arrays live on different devices."""


class ParameterError(AttnkitError, ValueError):
    """A non-array argument has a value outside what is supported."""


class ArgumentTypeError(AttnkitError, TypeError):
    """An argument has the wrong kind of object (not an array, another library's rng)."""


class AttnkitWarning(UserWarning):
    """Something the caller asked for could not be given (the call itself went on)."""
