"""Matplotlib drawing for :mod:`attnkit.viz`: the heatmap, colour scales, colour bars, saving.

With :mod:`attnkit.viz.figures_grid`, the only modules of ``attnkit.viz`` that import
matplotlib (lazily). Figures are ``matplotlib.figure.Figure`` objects made without pyplot
(no display, no global registry); a figure's size in inches is its print size, and no
text in it is smaller than :data:`TICK_PT` points.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "NOTE_PT",
    "TICK_PT",
    "colorbar",
    "heatmap_figure",
    "norm",
    "save_figure",
    "ticks",
    "wrap",
]

#: Font sizes in points at print size: token tick labels (the smallest text), notes.
TICK_PT = 6.5
NOTE_PT = 7.0
_LABEL_PT = 8.0
# At most this many tick labels per axis; beyond it every k-th token is labelled.
_MAX_TICKS = 48
# Colour-bar ticks of the square-root scale, as fractions of its top: the low weights
# it exists to show get ticks of their own (the default ticks are linear in the weight).
_SQRT_TICKS = (0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0)


def ticks(ax: Any, tokens: Sequence[str], axis: str, fontsize: float = TICK_PT) -> None:
    """Label ``axis`` ("x": rotated, "y") of ``ax`` with ``tokens`` (every k-th if many)."""
    step = max(1, math.ceil(len(tokens) / _MAX_TICKS))
    positions = list(range(0, len(tokens), step))
    labels = [tokens[i] for i in positions]
    if axis == "x":
        ax.set_xticks(positions, labels, rotation=90, fontsize=fontsize)
    else:
        ax.set_yticks(positions, labels, fontsize=fontsize)
    ax.tick_params(axis=axis, length=2, pad=1.5)


def wrap(title: str, inches: float, fontsize: float = 12.0) -> str:
    """``title`` wrapped to the figure's width (about 1.9 characters per point-inch)."""
    width = max(20, int(inches * 72 / (0.55 * fontsize)))
    return "\n".join(textwrap.fill(line, width) for line in title.splitlines())


def norm(top: float, scale: str) -> Any:
    """Colour from 0 to ``top``: linearly, or by square root (``scale="sqrt"``)."""
    from matplotlib.colors import Normalize, PowerNorm

    top = top if top > 0 else 1.0
    return PowerNorm(0.5, vmin=0.0, vmax=top) if scale == "sqrt" else Normalize(0.0, top)


def _top(matrix: Any) -> float:
    return float(matrix.max()) if matrix.size else 0.0


def colorbar(fig: Any, mappable: Any, axes: Any, label: str, scale: str, **kw: Any) -> Any:
    """A colour bar for ``mappable`` beside ``axes``; its ticks are in the data's units.

    The square-root scale gets ticks at 1 %, 5 %, 10 %, 25 %, ... of its top, so the weak
    weights it spreads out can be read off the bar (still in weight units, not roots).
    """
    sqrt = scale == "sqrt"
    if sqrt:  # "weight (one scale ...)" -> "weight (one scale ..., square-root colour scale)"
        label = (label[:-1] + ", " if label.endswith(")") else label + " (") + "square-root"
        label += " colour scale)"
    bar = fig.colorbar(mappable, ax=axes, label=label, **kw)
    if sqrt:
        top = mappable.norm.vmax
        bar.set_ticks(
            [top * f for f in _SQRT_TICKS], labels=[f"{top * f:.2g}" for f in _SQRT_TICKS]
        )
    bar.ax.tick_params(labelsize=TICK_PT + 0.5)
    bar.ax.yaxis.label.set_fontsize(_LABEL_PT)
    return bar


def heatmap_figure(
    matrix: Any,
    q_tokens: Sequence[str],
    k_tokens: Sequence[str],
    title: str,
    cmap: str,
    scale: str = "linear",
    colorbar_label: str = "attention weight",
) -> Any:
    """One (L, S) matrix with token labels (queries down, keys across) and a colour bar.

    ``scale`` is "linear" or "sqrt" (a square-root colour scale shows weak weights); the
    colour runs from 0 to the matrix maximum, and the colour bar, labelled
    ``colorbar_label``, shows that range in the matrix's units.
    """
    from matplotlib.figure import Figure

    L, S = matrix.shape
    width = min(16.0, max(4.5, 2.5 + 0.2 * S))
    height = min(16.0, max(4.0, 1.5 + 0.2 * L))
    fig = Figure(figsize=(width, height), layout="constrained")
    ax = fig.add_subplot()
    image = ax.imshow(
        matrix,
        cmap=cmap,
        norm=norm(_top(matrix), scale),
        aspect="auto",
        interpolation="nearest",
    )
    fontsize = 9 if max(L, S) <= 32 else 7
    ticks(ax, k_tokens, "x", fontsize)
    ticks(ax, q_tokens, "y", fontsize)
    ax.set_xlabel("key", fontsize=_LABEL_PT + 1)
    ax.set_ylabel("query", fontsize=_LABEL_PT + 1)
    ax.set_title(wrap(title, width - 1.5, 11.0), fontsize=11)
    colorbar(fig, image, ax, colorbar_label, scale, shrink=0.8)
    return fig


def save_figure(fig: Any, path: str | Path, fmt: str, dpi: int) -> None:
    """Write ``fig`` as ``fmt`` ("png", "svg" or "pdf") to ``path``.

    SVG keeps text as text (``svg.fonttype="none"``), so labels stay searchable and
    editable in a paper's figure.
    """
    import matplotlib

    with matplotlib.rc_context({"svg.fonttype": "none", "pdf.fonttype": 42}):
        fig.savefig(path, format=fmt, dpi=dpi)
