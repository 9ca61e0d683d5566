"""Progress for the command line's long work: a rich bar when possible, plain lines else.

rich is optional and lives behind :mod:`attnkit.app.display`; without it, or when
stderr is not a terminal, or with ``--plain``, progress is a line per step on stderr.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from . import display

__all__ = ["Progress"]


class Progress:
    """``with Progress(n, "viz", plain) as p: p.step("loading")`` ... ``p.finish()``.

    ``step(description)`` starts a step (and ends the previous one); ``quiet=True`` steps
    advance the bar without a line of their own (for many small steps).
    """

    def __init__(self, total: int, label: str, plain: bool = False) -> None:
        fancy = not plain and display.has_rich() and sys.stderr.isatty()
        self.fancy = fancy  # a rich bar (else plain lines)
        self._bar: Any = display.RichProgress(total, label=label) if fancy else None
        self.total, self.count, self.label = total, 0, label
        self._open: tuple[str, float, bool] | None = None

    def __enter__(self) -> Progress:
        if self._bar is not None:
            self._bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.finish()
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def step(self, description: str, *, quiet: bool = False) -> None:
        self.finish()
        self.count += 1
        self._open = (description, time.perf_counter(), quiet)
        if self._bar is not None:
            self._bar.start(description)
        elif not quiet:
            print(f"[{self.count}/{self.total}] {description} ...", file=sys.stderr, flush=True)

    def finish(self) -> None:
        """End the current step (done automatically by the next step and at exit)."""
        if self._open is None:
            return
        description, start, quiet = self._open
        self._open = None
        if self._bar is None:
            return
        if quiet:
            self._bar.advance()
        else:
            self._bar.done(description, f"{time.perf_counter() - start:.1f} s")
