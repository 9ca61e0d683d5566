"""``check_attention``: the kit's conformance cases and its fuzzer, run against anyone's
attention function, and the report.

The arguments are checked before any work (a bad one raises an attnkit error naming it,
its value and the fix); what the function itself does is never raised, only reported.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from ..errors import ArgumentTypeError, ParameterError
from . import arrays
from .adapters import declared_options, signature_supports
from .cases import CASES, Case
from .conventions import check_declared
from .detect import resolve
from .gradients import AUTODIFF
from .problem import CALL_KEYWORDS
from .report import CaseResult, Report
from .run import Target, run_case

__all__ = ["DEFAULT_EXAMPLES", "check_attention"]

#: Random calls the fuzzer draws by default (when hypothesis is installed).
DEFAULT_EXAMPLES = 20
#: The dtypes each library has (NumPy has no bfloat16; array-api-strict no 16-bit floats).
LIBRARY_DTYPES = {
    "numpy": ("float16", "float32", "float64"),
    "torch": arrays.DTYPES,
    "jax": arrays.DTYPES,
    "array_api_strict": ("float32", "float64"),
}
_WIDTH = {"float64": 3, "float32": 2, "float16": 1, "bfloat16": 0}
_INSTALL = {"torch": "torch", "jax": "jax", "array_api_strict": "array-api-strict"}


def _name(fn: Any) -> str:
    module = getattr(fn, "__module__", None) or ""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    return f"{module}.{name}" if module and module != "builtins" else name


def _supports(fn: Callable[..., Any], supports: Iterable[str] | None) -> tuple[frozenset[str], str]:
    """(the keyword arguments fn supports, a note when they could not be read)."""
    if supports is None:
        found = signature_supports(fn)
        if found is None:
            return frozenset(), (
                "Note: the function takes **kwargs (or has no signature to read), so no "
                "keyword argument was passed: name those it accepts with supports={...}."
            )
        return found, ""
    if isinstance(supports, str) or not isinstance(supports, Iterable):
        raise ArgumentTypeError(
            f"supports must be a set of keyword argument names, got {supports!r}; for "
            "example supports={'attn_mask', 'is_causal', 'scale'}."
        )
    names = frozenset(supports)
    unknown = sorted(n for n in names if n not in CALL_KEYWORDS)
    if unknown:
        raise ParameterError(
            f"supports names {', '.join(repr(n) for n in unknown)}, not keyword arguments of "
            f"the kit's calls; they are {', '.join(CALL_KEYWORDS)} (adapters map other "
            "names: attnkit.testing.adapters)."
        )
    return names, ""


def _library(library: Any, device: Any) -> str:
    if library not in arrays.LIBRARIES:
        raise ParameterError(
            f"library must be one of {', '.join(repr(n) for n in arrays.LIBRARIES)}, got "
            f"{library!r}: the library whose arrays the function takes."
        )
    if library != "numpy" and importlib.util.find_spec(library) is None:
        raise ParameterError(
            f"library={library!r} but {library} is not installed: pip install {_INSTALL[library]}."
        )
    if library == "numpy" and device not in (None, "cpu"):
        raise ParameterError(f"NumPy arrays live on the CPU: device={device!r} cannot be used.")
    if device is not None and library != "numpy":
        try:
            arrays.from_float64(np.zeros(1), library, "float32", device)
        except Exception as exc:  # the library's own words for what is wrong
            raise ParameterError(
                f"device={device!r} cannot hold {library} arrays here ({type(exc).__name__}: "
                f"{str(exc).strip()[:160]}); pass one of this machine's devices, or None."
            ) from exc
    return library


def _dtypes(dtypes: Any, library: str) -> tuple[str, ...]:
    have = LIBRARY_DTYPES[library]
    if dtypes is None:
        return ("float64", "float32")
    chosen = (dtypes,) if isinstance(dtypes, str) else tuple(dtypes)
    bad = [d for d in chosen if d not in have]
    if not chosen or bad:
        raise ParameterError(
            f"dtypes={dtypes!r}: {library} checks can use {', '.join(have)}; got "
            f"{', '.join(map(repr, bad)) or 'none'}."
        )
    return tuple(sorted(set(chosen), key=lambda d: -_WIDTH[d]))


def _examples(examples: Any) -> tuple[int, str]:
    have = importlib.util.find_spec("hypothesis") is not None
    if examples is None:
        if have:
            return DEFAULT_EXAMPLES, ""
        return 0, (
            'Fuzzer: not run, hypothesis is not installed (pip install "attnkit[testing]"); '
            "the fixed cases ran."
        )
    if isinstance(examples, bool) or not isinstance(examples, int) or examples < 0:
        raise ParameterError(
            f"examples must be an int >= 0 (random calls for the fuzzer), got {examples!r}."
        )
    if examples and not have:
        raise ParameterError(
            f"examples={examples} needs hypothesis, which is not installed: pip install "
            '"attnkit[testing]" (or pass examples=0 to run the fixed cases alone).'
        )
    return examples, ""


def _cases(names: Any) -> tuple[Case, ...]:
    if names is None:
        return CASES
    known = {c.name: c for c in CASES}
    chosen = (names,) if isinstance(names, str) else tuple(names)
    unknown = [n for n in chosen if n not in known]
    if unknown:
        raise ParameterError(
            f"cases names unknown case(s) {', '.join(map(repr, unknown))}; the cases are "
            f"{', '.join(known)}."
        )
    return tuple(known[n] for n in chosen)


def _resolved(results: list[CaseResult], conv: dict[str, str]) -> list[CaseResult]:
    """Each differing case's explanations in the light of the others: the conventions
    that cases explained one way only establish are assumed, and the passing cases rule
    out what they contradict (:func:`~attnkit.testing.detect.resolve`)."""
    votes: dict[str, set[str]] = {}
    for r in results:
        if r.status == "differs" and len(r.explanations) == 1:
            for f in r.explanations[0]:
                if f.convention:
                    votes.setdefault(f.convention, set()).add(f.variant)
    established = {c: v.pop() for c, v in votes.items() if len(v) == 1}

    def agrees(r: CaseResult) -> bool:  # right under the established conventions
        if r.status == "passed":
            return r.problem is not None
        if r.status != "differs" or len(r.explanations) != 1:
            return False
        return all(established.get(f.convention) == f.variant for f in r.explanations[0])

    agreeing = [r.problem for r in results if agrees(r)]
    out = []
    for r in results:
        if r.status == "differs" and r.compared and len(r.explanations) != 1:
            found = resolve(r.problem, r.actual, conv, established, agreeing, r.explanations)
            r = replace(r, explanations=found)
        out.append(r)
    return out


def check_attention(
    fn: Callable[..., Any],
    *,
    supports: Iterable[str] | None = None,
    conventions: Mapping[str, str] | None = None,
    examples: int | None = None,
    dtypes: Iterable[str] | None = None,
    gradients: bool | None = None,
    library: str | None = None,
    device: Any = None,
    cases: Iterable[str] | None = None,
    raise_on_failure: bool | None = None,
) -> Report:
    """Check ``fn(query, key, value, **kwargs)`` against the float64 oracle: the kit's
    conformance cases and ``examples`` fuzzer calls; returns the :class:`Report`.

    ``fn`` takes query (B, Hq, L, E), key (B, Hkv, S, E), value (B, Hkv, S, Ev) arrays of
    ``library`` ("numpy", "torch", "jax", "array_api_strict"; default "numpy") on
    ``device`` and returns the output (B, Hq, L, Ev) in the inputs' library, dtype and
    device. ``supports``: the keyword arguments it takes, of ``attn_mask`` (bool, True =
    may attend, or additive), ``is_causal``, ``scale``, ``enable_gqa``,
    ``causal_alignment``, ``window``, ``q_offset``, ``kv_offset``, ``softcap`` (default:
    those its signature names); a case needing another is skipped with that reason.
    ``conventions``: the variants it follows where they are not attnkit's (e.g.
    ``{"empty_rows": "mean"}``), which it is then held to. ``dtypes``: default float64 and
    float32; every case runs in the widest, the dtype-sensitive ones in each.
    ``gradients``: also compare the gradients (PyTorch, JAX) with the oracle's analytic
    ones. ``cases``: run only these cases by name. Defaults come from
    :func:`~attnkit.testing.declare`. Under pytest (or with ``raise_on_failure=True``) a
    report that is not ok raises :class:`~attnkit.testing.AttentionCheckError`.
    """
    options = declared_options(fn)
    library = _library(library or options.get("library", "numpy"), device)
    device = device if device is not None else options.get("device")
    if raise_on_failure is None:
        raise_on_failure = "PYTEST_CURRENT_TEST" in os.environ
    if not callable(fn):
        report = Report(
            repr(fn)[:80],
            library,
            (),
            notes=(
                f"fn is not callable: got {type(fn).__name__} {repr(fn)[:80]}; pass a "
                "function fn(query, key, value, **kwargs) returning the attention output.",
            ),
        )
        if raise_on_failure:
            report.raise_if_differs()
        return report
    names, note = _supports(fn, supports if supports is not None else options.get("supports"))
    declared = dict(conventions if conventions is not None else options.get("conventions", {}))
    chosen = check_declared(declared, "conventions")
    dtypes_ = _dtypes(dtypes if dtypes is not None else options.get("dtypes"), library)
    grads = bool(gradients if gradients is not None else options.get("gradients", False))
    if grads and library not in AUTODIFF:
        raise ParameterError(
            f"gradients=True needs automatic differentiation, which {library} has not: check "
            "the gradients of a PyTorch or JAX version of the function (library='torch' or "
            "'jax'), or pass gradients=False."
        )
    count, fuzz_note = _examples(examples if examples is not None else options.get("examples"))
    target = Target(fn, _name(fn), library, names, chosen, device)
    results: list[CaseResult] = []
    for case in _cases(cases):
        for dtype in dtypes_ if case.dtypes == "all" else dtypes_[:1]:
            results += run_case(target, case, dtype, gradients=grads)
    notes = [n for n in (note, fuzz_note) if n]
    if count:
        from .fuzz import fuzz  # hypothesis: imported only when the fuzzer runs

        found, line = fuzz(target, dtypes_[0], count)
        results += found
        notes.append(line)
    results = _resolved(results, chosen)
    report = Report(target.name, library, tuple(results), declared, tuple(notes))
    if raise_on_failure:
        report.raise_if_differs()
    return report
