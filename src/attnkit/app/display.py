"""The optional display libraries of the command line: rich (progress, tables), matplotlib.

The third-party libraries the CLI merely *shows* things with are imported here, lazily,
and nowhere else in the application (the pictures of :mod:`attnkit.viz` draw through
``attnkit.viz.figures``). Everything here has a plain-text fallback in the caller:
nothing in attnkit requires rich or matplotlib.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "MATPLOTLIB_HINT",
    "RichProgress",
    "has_matplotlib",
    "has_rich",
    "plot_times",
    "print_rich_table",
]

MATPLOTLIB_HINT = 'pip install matplotlib  (or: pip install "attnkit[viz]")'


def has_rich() -> bool:
    """Whether ``rich`` can be imported."""
    return importlib.util.find_spec("rich") is not None


def has_matplotlib() -> bool:
    """Whether ``matplotlib`` can be imported."""
    return importlib.util.find_spec("matplotlib") is not None


class RichProgress:
    """A rich progress bar on stderr: ``with RichProgress(n) as p: p.start(d); p.done(d, r)``."""

    def __init__(self, total: int, label: str = "bench") -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self._progress = Progress(
            TextColumn(f"[bold]{label}[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=Console(stderr=True),
            transient=False,
        )
        self._task = self._progress.add_task("", total=total)

    def __enter__(self) -> RichProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def start(self, description: str) -> None:
        """Show what is being measured now."""
        self._progress.update(self._task, description=description)

    def done(self, description: str, outcome: str) -> None:
        """One more measurement finished: print its outcome above the bar."""
        self._progress.console.print(f"{description}: {outcome}", markup=False, highlight=False)
        self._progress.advance(self._task)

    def advance(self) -> None:
        """One more step finished, nothing printed."""
        self._progress.advance(self._task)


def print_rich_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print a rich table to stdout; columns after the third are right-aligned numbers."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for i, header in enumerate(headers):
        table.add_column(header, justify="right" if 2 < i < len(headers) - 1 else "left")
    for row in rows:
        table.add_row(*row)
    Console().print(table)


def plot_times(
    path: str | Path, panels: dict[str, dict[str, list[tuple[int, float]]]], title: str
) -> None:
    """Log-log time against L: one panel per case kind, one line per implementation.

    ``panels`` maps a panel title to {line label: [(L, seconds), ...]}. Writes a PNG.
    """
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(6 * max(1, len(panels)), 4.5))
    axes_list: list[Any] = list(axes) if len(panels) > 1 else [axes]
    for ax, (panel, lines) in zip(axes_list, panels.items(), strict=False):
        for label, points in sorted(lines.items()):
            xs, ys = zip(*sorted(points), strict=True)
            ax.plot(xs, [1000 * y for y in ys], marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("L (query and key length)")
        ax.set_ylabel("median time (ms)")
        ax.set_title(panel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
