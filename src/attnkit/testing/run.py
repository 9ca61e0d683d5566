"""One case against one function: draw the inputs, call, check what came back, measure it
against the expectation, and explain a difference.

Nothing a function does crashes the kit: each failure becomes a line of the case's
result; :class:`Unsupported` skips the case with its reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import arrays
from .cases import Case
from .compare import compare
from .detect import explain
from .expect import expect
from .gradients import check_gradients
from .problem import Problem, draw, in_polarity
from .report import CaseResult

__all__ = ["Target", "Unsupported", "check_result", "run_case"]


class Unsupported(Exception):
    """Raised by a checked function (or an adapter) for a call it cannot express; the
    case is skipped with the message as the reason."""


@dataclass(frozen=True)
class Target:
    """The function under check and what it declares."""

    fn: Callable[..., Any]
    name: str
    library: str
    supports: frozenset[str]
    conventions: dict[str, str]
    device: Any = None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    message = text[0] if text else ""
    return f"{type(exc).__name__}: {message[:240]}"


def check_result(result: Any, like: Any, shape: tuple[int, ...], dtype: str) -> list[str]:
    """What is wrong with ``result`` for inputs like ``like`` (an input array): not an
    array, another library, shape, dtype or device; empty when nothing is."""
    library = arrays.library_of(like)
    if isinstance(result, tuple | list):
        return [
            f"returned a {type(result).__name__} of {len(result)}, not an array: the kit "
            "compares the output alone (wrap the function to return it)"
        ]
    got = arrays.library_of(result)
    if got is None:
        return [f"returned {arrays.describe(result)}, not an array"]
    if got != library:
        return [f"returned {arrays.describe(result)} for {library} inputs"]
    problems = []
    if tuple(result.shape) != tuple(shape):
        problems.append(f"returned shape {tuple(result.shape)}, expected {tuple(shape)}")
    if arrays.dtype_name(result) != dtype:
        problems.append(f"returned {arrays.dtype_name(result)} for {dtype} inputs")
    if arrays.device_of(result) != arrays.device_of(like):
        where = arrays.device_of(like)
        problems.append(f"returned an array on {arrays.device_of(result)}, inputs on {where}")
    return problems


def _skip(case: Case, dtype: str, reason: str) -> CaseResult:
    return CaseResult(case.name, dtype, "skipped", (reason,), call=case.describe())


def _inputs(t: Target, case: Case, p: Problem) -> tuple[list[Any], dict[str, Any]]:
    transposed = case.layout == "transposed"
    qkv = [
        arrays.from_float64(x, t.library, p.dtype, t.device, transposed)
        for x in (p.query, p.key, p.value)
    ]
    kwargs = dict(p.kwargs)
    if p.attn_mask is not None:
        kwargs["attn_mask"] = arrays.from_float64(p.attn_mask, t.library, p.dtype, t.device)
    return qkv, kwargs


def run_case(t: Target, case: Case, dtype: str, gradients: bool = False) -> list[CaseResult]:
    """Run ``case`` in ``dtype`` against ``t``: its result, and with ``gradients`` (and a
    ``grad`` case) a second result for the gradients."""
    result = _forward(t, case, dtype)
    if not (gradients and case.grad and dtype in ("float32", "float64")):
        return [result]
    name = f"{case.name} gradients"
    if result.status != "passed":
        return [
            result,
            CaseResult(name, dtype, "skipped", ("the output differs",), call=result.call),
        ]
    p = in_polarity(draw(case, dtype), t.conventions)
    with arrays.precision(t.library, dtype):
        qkv, kwargs = _inputs(t, case, p)
        status, lines = check_gradients(t.fn, qkv, kwargs, p, t.conventions, seed=case.seed + 1)
    return [result, CaseResult(name, dtype, status, lines, call=result.call)]


def _forward(t: Target, case: Case, dtype: str) -> CaseResult:
    missing = sorted(case.needs - t.supports)
    if missing:
        return _skip(
            case, dtype, f"needs {', '.join(missing)}, which the function does not support"
        )
    p = in_polarity(draw(case, dtype), t.conventions)
    e = expect(p, t.conventions)
    with arrays.precision(t.library, dtype):
        try:
            qkv, kwargs = _inputs(t, case, p)
            before = [arrays.to_float64(x) for x in qkv]
        except Exception as exc:  # the library refuses the dtype or device
            return _skip(case, dtype, f"{t.library} cannot make these inputs: {_first_line(exc)}")
        try:
            result = t.fn(*qkv, **kwargs)
        except Unsupported as exc:
            return _skip(case, dtype, str(exc))
        except Exception as exc:  # the function's own failure is a finding, not a crash
            return CaseResult(
                case.name, dtype, "differs", (f"raised {_first_line(exc)}",), call=case.describe()
            )
        try:
            lines = check_result(result, qkv[0], e.out.shape, dtype)
            if lines:
                return CaseResult(case.name, dtype, "differs", tuple(lines), call=case.describe())
            actual = arrays.to_float64(result)
        except Exception as exc:  # an object that looks like an array but is not one
            line = f"returned {arrays.describe(result)}, which cannot be read: {_first_line(exc)}"
            return CaseResult(case.name, dtype, "differs", (line,), call=case.describe())
        for name, x, old in zip(("query", "key", "value"), qkv, before, strict=True):
            if not np.array_equal(arrays.to_float64(x), old, equal_nan=True):
                lines.append(f"wrote into its input {name}")
        cmp = compare(actual, e.out, e.allowed, e.nan_ok)
        if not cmp.ok:
            lines.insert(0, cmp.words())
            try:
                found = explain(p, actual, t.conventions)
            except Exception as exc:  # a fault of the detectors must not hide the finding
                found = ()
                lines.append(f"(no convention named: the detectors failed, {_first_line(exc)})")
            return CaseResult(
                case.name,
                dtype,
                "differs",
                tuple(lines),
                found,
                case.describe(),
                compared=True,
                problem=p,
                actual=actual,
            )
        if lines:
            return CaseResult(case.name, dtype, "differs", tuple(lines), call=case.describe())
    return CaseResult(case.name, dtype, "passed", call=case.describe(), problem=p)
