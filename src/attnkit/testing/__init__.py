"""attnkit.testing: check any attention implementation against the float64 oracle."""

from __future__ import annotations

__all__: list[str] = []
