"""One compiled program per call signature, where the backend compiles (JAX), and one
operator per call while a framework's compiler traces (``torch.compile``).

On a backend that declares ``Backend.compile`` (``jax.jit``) an eager call runs through a
program compiled once per signature: the call's arrays are its arguments, everything
else is static and keys a cache of programs. While ``torch.compile`` traces, the backend's
``traced_call`` makes the call one operator of the graph, so the graph does not grow
with L. A general ``score_mod`` callable runs uncompiled (it may close over values that
change between calls); ``score_mods.alibi`` and ``softcap`` carry a key.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import array_api_compat as aac

from .compiling import tracing
from .masks import Mask
from .options import Options

__all__ = ["compiled_call"]

_MAX = 64
_PROGRAMS: dict[tuple[Any, ...], Callable[..., Any]] = {}
_STATE = threading.local()  # ``inside``: tracing one of these programs


def compiled_call(
    query: Any, key: Any, value: Any, options: Options, call: Callable[..., Any], backend: Any
) -> tuple[bool, Any]:
    """``(True, result)`` of ``call(query, key, value, options)`` through the cached
    compiled program of its signature, or ``(False, None)`` where the call runs as it
    is (a backend that compiles nothing, a call being compiled already, a general
    callable ``score_mod``, an argument that cannot key a cache). ``backend``: the
    query's (:func:`attnkit._dispatch.compiler_of`)."""
    if getattr(_STATE, "inside", False):
        return False, None
    if backend.traced_call is not None and tracing():  # torch.compile: one operator
        out = backend.traced_call(query, key, value, options)
        if out is not None:
            return True, out
    if backend.compile is None or not backend.compiles(query):
        return False, None  # nothing compiled, or inside the compiler's trace already
    split = _split(query, key, value, options)
    if split is None:
        return False, None
    static, arrays, rebuild = split
    kind = type(query)
    if any(type(x) is not kind for x in arrays):
        return False, None  # arrays of another library: validation names them
    if options.rng is not None:
        try:
            backend.check_rng(options.rng, like=query)
        except Exception:  # the call's own check raises its error, naming what was given
            return False, None
    try:
        program = _PROGRAMS.get(static)
    except TypeError:  # an unhashable argument: validation judges it
        return False, None
    if program is None:
        program = backend.compile(_program(rebuild, call))
        if len(_PROGRAMS) >= _MAX:
            _PROGRAMS.clear()
        _PROGRAMS[static] = program
    return True, program(*arrays)


def _program(rebuild: Callable[..., Any], call: Callable[..., Any]) -> Callable[..., Any]:
    def program(*arrays: Any) -> Any:
        _STATE.inside = True
        try:
            q, k, v, options = rebuild(arrays)
            return call(q, k, v, options)
        finally:
            _STATE.inside = False

    return program


def _split(
    query: Any, key: Any, value: Any, o: Options
) -> tuple[tuple[Any, ...], list[Any], Callable[..., Any]] | None:
    """(the static key, the arrays, a function rebuilding (q, k, v, options) from the
    arrays), or None where the call is not compiled."""
    mod = o.score_mod
    if mod is not None and getattr(mod, "key", None) is None:
        return None  # a general callable: run as it is
    arrays = [query, key, value]
    parts: list[Any] = []  # how each option is rebuilt

    def take(x: Any, name: str) -> Any:
        if x is None:
            return ("none",)
        if isinstance(x, Mask):
            mask_key, held = x.flatten()
            hollow = x.unflatten((None,) * len(held))  # the cache keeps no caller's array
            parts.append((name, "mask", len(arrays), len(held), hollow))
            arrays.extend(held)
            return ("mask", mask_key)
        if aac.is_array_api_obj(x):
            parts.append((name, "array", len(arrays), 1, None))
            arrays.append(x)
            return ("array",)
        if name == "window" and isinstance(x, list):
            return ("value", tuple(x))
        if name == "window" or name == "rng":
            return ("value", x)
        return None

    mask_key = take(o.attn_mask, "attn_mask")
    window_key = take(o.window, "window")
    rng_key = take(o.rng, "rng")
    if mask_key is None or window_key is None:
        return None
    scalars = tuple(getattr(o, n) for n in _SCALARS)
    static = (type(query), mask_key, window_key, rng_key, None if mod is None else mod.key, scalars)

    template = o._replace(**{name: None for name, *_ in parts})  # no caller's array kept

    def rebuild(given: tuple[Any, ...]) -> tuple[Any, Any, Any, Options]:
        fields = {}
        for name, kind, at, n, hollow in parts:
            held = tuple(given[at : at + n])
            fields[name] = hollow.unflatten(held) if kind == "mask" else given[at]
        return given[0], given[1], given[2], template._replace(**fields)

    return static, arrays, rebuild


#: The options that key the program as they are (Python scalars and strings).
_SCALARS = (
    "dropout_p",
    "is_causal",
    "scale",
    "enable_gqa",
    "causal_alignment",
    "return_weights",
    "return_lse",
    "q_offset",
    "kv_offset",
    "impl",
    "block_size",
)
