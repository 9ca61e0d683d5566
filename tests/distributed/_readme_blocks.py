"""The README's paste-and-run scripts (``cat > NAME <<'EOF' ... EOF`` in a bash block)."""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["README", "script"]

README = Path(__file__).parents[2] / "README.md"


def script(name: str) -> str:
    """The text of the script the README writes to ``name``."""
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"cat > {re.escape(name)} <<'EOF'\n(.*?)\nEOF\n", text, re.S)
    if match is None:
        raise AssertionError(f"README.md has no `cat > {name} <<'EOF'` block")
    return match.group(1) + "\n"
