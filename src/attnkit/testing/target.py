"""A function named as ``package.module:function`` (the pytest plugin's and ``attnkit
verify --against``'s argument), imported, and the options a command line gives it."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from ..errors import ParameterError

__all__ = ["load", "options_from_strings"]


def load(spec: str) -> Callable[..., Any]:
    """The object ``spec`` names: ``package.module:function`` (``module:Class.method``
    too); raises a :class:`~attnkit.errors.ParameterError` naming what is missing."""
    module_name, sep, attribute = str(spec).partition(":")
    if not sep or not module_name or not attribute:
        raise ParameterError(
            f"{spec!r} does not name a function: write package.module:function, e.g. "
            "mykernels.attention:flash_forward."
        )
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ParameterError(
            f"{spec!r}: module {module_name!r} cannot be imported ({exc}); install it or "
            "run from the directory that holds it."
        ) from exc
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise ParameterError(
                f"{spec!r}: {type(obj).__name__} {getattr(obj, '__name__', obj)!r} has no "
                f"attribute {part!r}."
            )
        obj = getattr(obj, part)
    return obj


def options_from_strings(
    library: str | None, supports: str | None, examples: int | None, dtypes: str | None
) -> dict[str, Any]:
    """check_attention's keyword arguments from command-line strings (None: not given;
    ``supports`` and ``dtypes`` comma-separated, ``supports=""`` for none)."""
    options: dict[str, Any] = {}
    if library is not None:
        options["library"] = library
    if supports is not None:
        options["supports"] = frozenset(s.strip() for s in supports.split(",") if s.strip())
    if examples is not None:
        options["examples"] = examples
    if dtypes is not None:
        options["dtypes"] = tuple(d.strip() for d in dtypes.split(",") if d.strip())
    return options
