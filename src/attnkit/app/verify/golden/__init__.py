"""The golden vectors, shipped with the package so that ``attnkit verify`` needs no checkout.

``python conformance/make_golden.py`` writes them here; ``attnkit verify`` and
``conformance/test_golden.py`` read them. Each ``.npz`` file holds float64 inputs
(``query``, ``key``, ``value``, optional ``attn_mask``), the call's keyword arguments as
JSON (``kwargs``) and the float64 oracle's ``out``, ``weights`` and ``lse``.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

__all__ = ["files"]


def files() -> list[Any]:
    """The golden ``.npz`` files, sorted by name (each one opens with ``.open("rb")``)."""
    root = resources.files(__name__)
    return sorted((f for f in root.iterdir() if f.name.endswith(".npz")), key=lambda f: f.name)
