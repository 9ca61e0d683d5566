"""How many of the package's files one plain NumPy call enters: a reader following a
call should meet few rooms, and a repeated call (its validation and plan kept per
signature) fewer. Counted with ``sys.setprofile``; the figures are printed."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

import attnkit as ak
from attnkit import _dispatch, backends

#: Files of the package a first plain causal call enters, and a repeated one, at most:
#: the public function, its options and dispatch, the trace test, validation (first call),
#: the plan and cost model (first call), the executor, its operands and NaN guard, the
#: block and its tile (the causal mask's modules), and the NumPy kernel.
FIRST_CALL_FILES = 20
REPEATED_CALL_FILES = 14
ROOTS = tuple(str(Path(m.__file__).parent) for m in (ak, backends))


def _entered(fn: Any) -> tuple[list[str], int]:
    """The package's files ``fn()`` enters (in order of first entry) and how many times
    the profile moves from one file to another."""
    files: dict[str, None] = {}
    switches, last = 0, None

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal switches, last
        if event != "call":
            return
        name = frame.f_code.co_filename
        if name.startswith(ROOTS):
            files[name] = None
            switches += name != last
            last = name

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return list(files), switches


def test_plain_numpy_call_enters_few_files() -> None:
    rng = np.random.default_rng()
    L = int(rng.integers(200, 300))  # a signature no other test has cached
    q, k, v = (rng.standard_normal((2, 4, L, 64)) for _ in range(3))
    _dispatch._VALIDATED.clear()
    _dispatch._PLANNED.clear()

    def call() -> None:
        ak.scaled_dot_product_attention(q, k, v, is_causal=True)

    def shown(files: list[str]) -> str:
        return " ".join(str(Path(f).relative_to(Path(f).parents[1])) for f in files)

    first, first_switches = _entered(call)
    again, again_switches = _entered(call)
    print(f"\nfirst call: {len(first)} files, {first_switches} switches: {shown(first)}")
    print(f"repeated call: {len(again)} files, {again_switches} switches: {shown(again)}")
    assert len(first) <= FIRST_CALL_FILES, f"{len(first)} files, allowed {FIRST_CALL_FILES}"
    assert len(again) <= REPEATED_CALL_FILES, f"{len(again)} files, allowed {REPEATED_CALL_FILES}"
    assert set(again) <= set(first)
