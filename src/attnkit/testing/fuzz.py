"""The kit's fuzzer: hypothesis draws whole calls within what a function supports and runs
each like a fixed case; a differing call is shrunk to a small one.

Calls: batch 1 or 2, 1 or 2 key/value heads (GQA groups where supported), L and S from 0
to 9, E and Ev from 1 to 9, masks in any broadcast form, both causal alignments,
windows, offsets, scales and soft caps, each where supported; derandomized. Imported
only when the fuzzer runs (hypothesis: the ``attnkit[testing]`` extra).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import hypothesis
import hypothesis.strategies as st

from .cases import Case, MaskSpec
from .report import CaseResult
from .run import Target, run_case

__all__ = ["calls", "fuzz"]


@st.composite
def calls(draw: Any, supports: frozenset[str]) -> Case:
    """A :class:`~attnkit.testing.cases.Case` using only the keyword arguments in
    ``supports``."""
    B, hkv = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    groups = draw(st.integers(1, 3)) if "enable_gqa" in supports else 1
    hq = hkv * groups
    L, S = (draw(st.one_of(st.integers(1, 9), st.just(0))) for _ in range(2))
    E = draw(st.integers(1, 9))
    Ev = draw(st.one_of(st.just(E), st.integers(1, 9)))
    kwargs: dict[str, Any] = {}
    if groups > 1:
        kwargs["enable_gqa"] = True
    mask = None
    if "attn_mask" in supports and draw(st.booleans()):
        shape = draw(
            st.sampled_from([(L, S), (B, 1, L, S), (1, hq, L, S), (B, hq, L, S), (B, 1, 1, S)])
        )
        rows = tuple(draw(st.lists(st.integers(0, max(L - 1, 0)), max_size=2))) if L else ()
        mask = MaskSpec(
            kind=draw(st.sampled_from(["bool", "additive"])),
            shape=shape,
            keep=draw(st.sampled_from([0.5, 0.8, 1.0])),
            bias=draw(st.booleans()),
            empty_rows=rows if shape[-2] == L and L else (),
        )
    if "is_causal" in supports and draw(st.booleans()):
        kwargs["is_causal"] = True
    if "window" in supports and draw(st.booleans()):
        side = st.one_of(st.none(), st.integers(0, 4))
        kwargs["window"] = draw(st.one_of(st.integers(0, 4), st.tuples(side, side)))
    positional = kwargs.get("is_causal") or kwargs.get("window") is not None
    if positional and "causal_alignment" in supports and draw(st.booleans()):
        kwargs["causal_alignment"] = draw(st.sampled_from(["top_left", "bottom_right"]))
    for name in ("q_offset", "kv_offset"):
        if positional and name in supports and draw(st.booleans()):
            kwargs[name] = draw(st.integers(0, 6))
    if "scale" in supports and draw(st.booleans()):
        kwargs["scale"] = draw(st.sampled_from([0.05, 0.3, 1.0, 2.5, -0.7]))
    if "softcap" in supports and draw(st.booleans()):
        kwargs["softcap"] = draw(st.sampled_from([0.5, 2.0, 10.0]))
    return Case(
        "fuzz",
        (B, hq, L, E),
        (B, hkv, S, E),
        (B, hkv, S, Ev),
        kwargs=kwargs,
        mask=mask,
        magnitude=draw(st.sampled_from([0.5, 1.0, 3.0])),
        seed=draw(st.integers(0, 2**16 - 1)),
    )


@dataclass
class _Found(Exception):
    result: CaseResult


#: Calls hypothesis may spend shrinking a differing call: a slow function (a new shape
#: can cost a JAX compilation) must not make the kit slow; the smallest call found by
#: then is reported.
SHRINK_CALLS = 40


def fuzz(t: Target, dtype: str, examples: int) -> tuple[list[CaseResult], str]:
    """Run ``examples`` random calls in ``dtype``; (results, a line for the report): the
    smallest differing call hypothesis found (if any), and the calls skipped."""
    tally = {"passed": 0, "skipped": 0, "shrinking": 0}
    found: list[CaseResult] = []

    @hypothesis.settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(hypothesis.HealthCheck),
        report_multiple_bugs=False,
        print_blob=False,
    )
    @hypothesis.given(calls(t.supports))
    def probe(case: Case) -> None:
        if found:
            tally["shrinking"] += 1
            if tally["shrinking"] > SHRINK_CALLS:
                return  # out of budget: the last differing call found stands
        result = run_case(t, case, dtype)[0]
        if result.status == "differs":
            found.append(result)
            raise _Found(result)
        if not found:
            tally[result.status] += 1

    try:
        probe()
    except Exception:  # _Found (shrunk), or hypothesis' complaint that the budget cut it
        if not found:
            raise
    if found:
        named = replace(found[-1], case="fuzz (shrunk)")
        number = tally["passed"] + tally["skipped"] + 1
        return [named], f"Fuzzer: a differing call found by hypothesis in {dtype} (call {number})."
    line = (
        f"Fuzzer: {tally['passed']} random calls in {dtype} agree"
        + (
            f", {tally['skipped']} skipped (not expressible in the function)"
            if tally["skipped"]
            else ""
        )
        + "."
    )
    passed = (
        CaseResult(f"fuzz ({tally['passed']} calls)", dtype, "passed") if tally["passed"] else None
    )
    return ([passed] if passed else []), line
