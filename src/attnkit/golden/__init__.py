"""The golden vectors, shipped with the package so that ``attnkit verify`` needs no checkout.

Byte-for-byte copies of the repository's ``conformance/golden/*.npz`` (a unit test checks
that they are identical; ``python conformance/make_golden.py`` rewrites the originals).
Each file holds float64 inputs (``query``, ``key``, ``value``, optional ``attn_mask``),
the call's keyword arguments as JSON (``kwargs``) and the independent float64 oracle's
``out``, ``weights`` and ``lse``. Reading them needs NumPy (``numpy.load``); this package
only lists them.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

__all__ = ["files"]


def files() -> list[Any]:
    """The golden ``.npz`` files, sorted by name (each one opens with ``.open("rb")``)."""
    root = resources.files(__name__)
    return sorted((f for f in root.iterdir() if f.name.endswith(".npz")), key=lambda f: f.name)
