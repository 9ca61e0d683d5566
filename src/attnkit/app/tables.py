"""The command line's one plain text table format (no dependency needed)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

__all__ = ["milliseconds", "not_installed", "table"]


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """``headers`` and ``rows`` as left-aligned columns two spaces apart, under a rule."""
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    rule = "  ".join("-" * w for w in widths)
    body = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join([line, rule, *body])


def milliseconds(seconds: float, digits: int = 3) -> str:
    """``seconds`` in milliseconds to ``digits`` significant digits: ``"12.3 ms"``."""
    return f"{1000 * seconds:.{digits}g} ms"


def not_installed(missing: Sequence[str], file: TextIO | None = None, *, gap: bool = False) -> None:
    """Print the backends or frameworks in ``missing``, one a line, under "Not installed
    (install to include them):" (after a blank line if ``gap``); nothing if none is."""
    if missing:
        print(("\n" if gap else "") + "Not installed (install to include them):", file=file)
        print("\n".join(f"  {m}" for m in missing), file=file)
