"""Matplotlib drawing for :mod:`attnkit.viz`: heatmaps, head grids, layer x head overviews.

The only module of ``attnkit.viz`` that imports matplotlib (lazily, when a picture is
asked for): the pictures are drawn here, from NumPy arrays that ``attnkit.viz.plots`` has
already validated and converted (through the backend adapters' ``to_numpy``).
Headless-safe: figures are ``matplotlib.figure.Figure`` objects made without pyplot, so
no display, no global figure registry and no GUI backend are touched; saving uses the
canvas of the file format (Agg for PNG).
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["grid_figure", "heatmap_figure", "save_figure"]

# At most this many tick labels per axis; beyond it every k-th token is labelled.
_MAX_TICKS = 48


def _ticks(ax: Any, tokens: Sequence[str], axis: str, fontsize: float) -> None:
    step = max(1, math.ceil(len(tokens) / _MAX_TICKS))
    positions = list(range(0, len(tokens), step))
    labels = [tokens[i] for i in positions]
    if axis == "x":
        ax.set_xticks(positions, labels, rotation=90, fontsize=fontsize)
    else:
        ax.set_yticks(positions, labels, fontsize=fontsize)


def _wrap(title: str, inches: float, fontsize: float = 12.0) -> str:
    """``title`` wrapped to the figure's width (about 1.9 characters per point-inch)."""
    width = max(20, int(inches * 72 / (0.55 * fontsize)))
    return "\n".join(textwrap.fill(line, width) for line in title.splitlines())


def _norm(matrix: Any, scale: str) -> Any:
    """Colour from 0 to the matrix maximum: linearly, or by square root ("sqrt")."""
    from matplotlib.colors import Normalize, PowerNorm

    top = float(matrix.max()) if matrix.size else 0.0
    top = top if top > 0 else 1.0
    return PowerNorm(0.5, vmin=0.0, vmax=top) if scale == "sqrt" else Normalize(0.0, top)


def heatmap_figure(
    matrix: Any,
    q_tokens: Sequence[str],
    k_tokens: Sequence[str],
    title: str,
    cmap: str,
    scale: str = "linear",
) -> Any:
    """One (L, S) matrix with token labels (queries down, keys across) and a colorbar.

    ``scale`` is "linear" or "sqrt" (a square-root colour scale shows weak weights).
    """
    from matplotlib.figure import Figure

    L, S = matrix.shape
    width = min(16.0, max(4.5, 2.5 + 0.2 * S))
    height = min(16.0, max(4.0, 1.5 + 0.2 * L))
    fig = Figure(figsize=(width, height), layout="constrained")
    ax = fig.add_subplot()
    image = ax.imshow(
        matrix, cmap=cmap, norm=_norm(matrix, scale), aspect="auto", interpolation="nearest"
    )
    fontsize = 9 if max(L, S) <= 32 else 7
    _ticks(ax, k_tokens, "x", fontsize)
    _ticks(ax, q_tokens, "y", fontsize)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    ax.set_title(_wrap(title, width - 1.5))
    fig.colorbar(image, ax=ax, shrink=0.8, label="attention weight")
    return fig


def grid_figure(
    cells: Sequence[Sequence[tuple[str, Any] | None]],
    row_labels: Sequence[str] | None,
    q_tokens: Sequence[str],
    k_tokens: Sequence[str],
    title: str,
    cmap: str,
    scale: str = "linear",
) -> Any:
    """A grid of panels: ``cells[r][c]`` is ``(panel title, (L, S) matrix)`` or None (blank).

    ``row_labels`` go on the left of each row. Each panel is coloured from 0 to its own
    maximum (as in BertViz), so weak heads stay visible; token labels appear on the outer
    panels when L and S are at most 24
    and there are at most 8 columns.
    """
    from matplotlib.figure import Figure

    rows, cols = len(cells), max(len(row) for row in cells)
    L, S = len(q_tokens), len(k_tokens)
    labelled = max(L, S) <= 24 and cols <= 8
    side = 2.6 if labelled else 1.25
    width = 0.8 + side * cols
    fig = Figure(figsize=(width, 1.0 + side * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    for r in range(rows):
        for c in range(cols):
            ax = axes[r][c]
            cell = cells[r][c] if c < len(cells[r]) else None
            if cell is None:
                ax.set_axis_off()
                continue
            name, matrix = cell
            ax.imshow(matrix, cmap=cmap, norm=_norm(matrix, scale), interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            below = cells[r + 1][c] if r + 1 < rows and c < len(cells[r + 1]) else None
            if labelled and below is None:
                _ticks(ax, k_tokens, "x", 6)
            if labelled and c == 0:
                _ticks(ax, q_tokens, "y", 6)
            if name:
                ax.set_title(name, fontsize=8)
            if row_labels and c == 0:
                ax.set_ylabel(row_labels[r], fontsize=9)
    fig.suptitle(_wrap(title, width))
    return fig


def save_figure(fig: Any, path: str | Path, fmt: str, dpi: int) -> None:
    """Write ``fig`` as ``fmt`` ("png", "svg" or "pdf") to ``path``."""
    fig.savefig(path, format=fmt, dpi=dpi)
