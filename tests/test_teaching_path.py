"""The README's teaching path is the path a plain call runs: a learner reads
``reference.py`` (the formula on arrays) and then ``blocked/block.py``'s
``block_formula``, which a plain ``impl="generic"`` call enters; both files stay short."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np

import attnkit as ak
from attnkit import reference
from attnkit.blocked import block

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "attnkit"


def _entered(call: Any) -> set[tuple[str, str]]:
    """(file name, function name) of every attnkit function ``call()`` enters."""
    seen: set[tuple[str, str]] = set()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and "attnkit" in frame.f_code.co_filename:
            seen.add((Path(frame.f_code.co_filename).name, frame.f_code.co_name))

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return seen


def test_readme_names_the_block_formula() -> None:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Learn attention from the code") :]
    assert "`block_formula`" in section and "blocked/block.py" in section
    assert re.search(r"reference\.py", section)


def test_a_plain_generic_call_runs_the_named_formula() -> None:
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 2, 96, 16), dtype=np.float32) for _ in range(3))
    seen = _entered(
        lambda: ak.scaled_dot_product_attention(q, k, v, is_causal=True, impl="generic")
    )
    assert ("block.py", block.block_formula.__name__) in seen, sorted(seen)


def test_the_formula_on_arrays_matches_the_call() -> None:
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 3, 7, 8)) for _ in range(3))
    allowed = np.tril(np.ones((7, 7), dtype=bool))
    allowed[0] = False  # a row with no key: 0
    out = reference.attention(q, k, v, allowed=allowed)
    want = ak.scaled_dot_product_attention(q, k, v, attn_mask=allowed, impl="generic")
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)
    assert not out[..., 0, :].any()


def test_the_two_files_a_learner_reads_stay_short() -> None:
    for path in (SRC / "reference.py", SRC / "blocked" / "block.py"):
        lines = len(path.read_text().splitlines())
        assert lines < 150, f"{path.name} has {lines} lines; the teaching path keeps it < 150"
