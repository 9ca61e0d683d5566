"""The paste-and-run scripts (``cat > NAME <<'EOF' ... EOF`` in a bash block) of the README
and of the distributed modules' docstrings, which the tests run as they are."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

__all__ = ["README", "TORCH_DISTRIBUTED", "script"]

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
#: attnkit.backends.torch.distributed, whose docstring holds the torchrun script.
TORCH_DISTRIBUTED = ROOT / "backends" / "torch" / "distributed" / "__init__.py"


def script(name: str, source: Path = README) -> str:
    """The text of the script that ``source`` writes to ``name`` (a Markdown block, or a
    literal block of a docstring, indented: the indent is removed)."""
    text = source.read_text(encoding="utf-8")
    pattern = rf"^([ \t]*)cat > {re.escape(name)} <<'EOF'\n(.*?)\n\1EOF\n"
    match = re.search(pattern, text, re.S | re.M)
    if match is None:
        raise AssertionError(f"{source.name} has no `cat > {name} <<'EOF'` block")
    return textwrap.dedent(match.group(2)) + "\n"
