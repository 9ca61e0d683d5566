"""The examples in the public modules' docstrings run, as the README's do.

The reference material lives in the docstrings of the public modules (``help(attnkit)``,
``help(attnkit.masks)``, ...); their ``.. code-block:: python`` blocks and ``>>>``
examples are run here through Sybil's reST parsers, in order, in one namespace per
module. Each module's number of examples is pinned, so an example that stops being
collected (a broken directive, a lost indent) fails as surely as one that raises.
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

pytest.importorskip("sybil")
from sybil import Document
from sybil.parsers.rest import DocTestParser, PythonCodeBlockParser, SkipParser

#: module -> (what it needs installed beyond NumPy, the examples its docstring holds).
MODULES: dict[str, tuple[str | None, int]] = {
    "attnkit.vjp": (None, 2),
    "attnkit.multi_head": (None, 1),
    "attnkit.kv_cache": (None, 1),
    "attnkit.masks": (None, 1),
    "attnkit.score_mods": (None, 10),  # each >>> statement is one example
    "attnkit.approx": (None, 1),
    "attnkit.rollout": (None, 7),
    "attnkit.viz": ("matplotlib", 1),
    "attnkit.testing": (None, 1),
    "attnkit.backends.torch.nn": ("torch", 1),
    "attnkit.backends.jax.nn": ("jax", 1),
    "attnkit.backends.jax.flax": ("flax", 1),
}
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def examples(name: str) -> list:
    """The examples of module ``name``'s docstring, parsed as reST."""
    module = importlib.import_module(name)
    document = Document(module.__doc__ or "", str(Path(module.__file__ or name)))
    for parser in (PythonCodeBlockParser(), DocTestParser(optionflags=FLAGS), SkipParser()):
        for region in parser(document):
            document.add(region)
    return list(document.examples())


@pytest.mark.parametrize("name", list(MODULES))
def test_docstring_examples_run(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    needs, count = MODULES[name]
    if needs is not None:
        pytest.importorskip(needs)
    monkeypatch.chdir(tmp_path)  # examples that save files write them here
    found = examples(name)
    if found:  # the math's docstrings use NumPy as np without importing it (the math
        # imports no array library; examples are written for a NumPy user)
        found[0].namespace.setdefault("np", importlib.import_module("numpy"))
    assert len(found) == count, f"{name}: {len(found)} examples collected, {count} expected"
    for example in found:
        example.evaluate()
    with capsys.disabled():
        print(f"\n{name}: {len(found)} docstring examples ran")


def test_a_broken_example_fails() -> None:
    """The harness is not vacuous: a wrong doctest output and a raising block both fail."""
    text = """
>>> 1 + 1
3

.. code-block:: python

    raise ValueError("broken")
"""
    document = Document(text, "broken.rst")
    for parser in (PythonCodeBlockParser(), DocTestParser(optionflags=FLAGS)):
        for region in parser(document):
            document.add(region)
    found = list(document.examples())
    assert len(found) == 2
    with pytest.raises(Exception, match="Expected"):
        found[0].evaluate()
    with pytest.raises(ValueError, match="broken"):
        found[1].evaluate()
