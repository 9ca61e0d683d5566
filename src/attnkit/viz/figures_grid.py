"""Matplotlib drawing of grids of panels: the heads of a layer, the layers x heads overview.

Drawn from NumPy arrays already validated by :mod:`attnkit.viz.plots`. Every grid has one
colour bar and states its colour scale in the figure: ``panel_scale="panel"`` (each panel
0 to its own maximum, as BertViz) or ``"shared"`` (one range, in weight units). Token
labels go on the outer panels when every token gets at least ``_PITCH_PT`` points at
print size; otherwise a note says they were left out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .figures import NOTE_PT, TICK_PT, colorbar, norm, ticks, wrap

__all__ = ["grid_figure", "panel_layout"]

_TITLE_PT = 7.5  # panel titles and row labels
_PITCH_PT = 1.3 * TICK_PT  # room one token label needs along a panel edge
_CHAR_IN = 0.6 * TICK_PT / 72  # width of one tick-label character, in inches


def panel_layout(
    rows: int, cols: int, q_tokens: Sequence[str], k_tokens: Sequence[str], titled_rows: int
) -> tuple[float, bool, tuple[float, float]]:
    """``(panel side in inches, token labels shown, figure size in inches)``.

    The panel side starts at about 10 inches / columns (0.75 to 2 inches); it grows up to
    about 13 inches / columns (at most 2.6) to fit one label per token, and labels are
    shown only if they fit.
    """
    base = min(2.0, max(0.75, 10.0 / cols))
    room = max(base, min(2.6, 13.0 / cols))
    need = max(len(q_tokens), len(k_tokens)) * _PITCH_PT / 72
    labelled = need <= room
    side = max(base, need) if labelled else base
    longest_q = max((len(t) for t in q_tokens), default=1) if labelled else 0
    longest_k = max((len(t) for t in k_tokens), default=1) if labelled else 0
    width = 0.35 + longest_q * _CHAR_IN + cols * (side + 0.06) + 1.0  # row label, bar
    height = 0.9 + titled_rows * 0.17 + rows * (side + 0.06) + longest_k * _CHAR_IN + 0.35
    return side, labelled, (math.ceil(width * 10) / 10, math.ceil(height * 10) / 10)


def grid_figure(
    cells: Sequence[Sequence[tuple[str, Any] | None]],
    row_labels: Sequence[str] | None,
    q_tokens: Sequence[str],
    k_tokens: Sequence[str],
    title: str,
    cmap: str,
    scale: str = "linear",
    panel_scale: str = "panel",
) -> Any:
    """A grid of panels: ``cells[r][c]`` is ``(panel title, (L, S) matrix)`` or None (blank).

    ``row_labels`` go on the left of each row; ``scale`` is the colour scale ("linear" or
    "sqrt"), ``panel_scale`` the range ("panel": each panel 0 to its own maximum;
    "shared": 0 to the maximum of all panels). One colour bar for the grid, a note below
    it stating the range (and the token labels left out, if any).
    """
    from matplotlib.cm import ScalarMappable
    from matplotlib.figure import Figure

    rows, cols = len(cells), max(len(row) for row in cells)
    titled_rows = sum(any(cell is not None and cell[0] for cell in row) for row in cells)
    _side, labelled, size = panel_layout(rows, cols, q_tokens, k_tokens, titled_rows)
    matrices = [cell[1] for row in cells for cell in row if cell is not None]
    top = max(float(m.max()) if m.size else 0.0 for m in matrices)
    shared = norm(top, scale) if panel_scale == "shared" else None
    fig = Figure(figsize=size, layout="constrained")
    fig.get_layout_engine().set(w_pad=0.02, h_pad=0.02, wspace=0.02, hspace=0.02)
    axes = fig.subplots(rows, cols, squeeze=False)
    drawn = []
    for r in range(rows):
        for c in range(cols):
            ax = axes[r][c]
            cell = cells[r][c] if c < len(cells[r]) else None
            if cell is None:
                ax.set_axis_off()
                continue
            drawn.append(ax)
            name, matrix = cell
            own = shared or norm(float(matrix.max()) if matrix.size else 0.0, scale)
            ax.imshow(matrix, cmap=cmap, norm=own, aspect="auto", interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            below = cells[r + 1][c] if r + 1 < rows and c < len(cells[r + 1]) else None
            if labelled and below is None:
                ticks(ax, k_tokens, "x")
            if labelled and c == 0:
                ticks(ax, q_tokens, "y")
            if name:
                ax.set_title(name, fontsize=_TITLE_PT, pad=2)
            if row_labels and c == 0:
                ax.set_ylabel(row_labels[r], fontsize=_TITLE_PT)
    if shared is not None:
        mappable = ScalarMappable(norm=shared, cmap=cmap)
        label = "attention weight (one scale for all panels)"
        notes = [f"one colour scale for all panels: 0 to {top:.3g}, the largest weight"]
    else:
        mappable = ScalarMappable(norm=norm(1.0, scale), cmap=cmap)
        label = "weight / the panel's maximum"
        notes = ['each panel is scaled to its own maximum (scale="shared": one scale)']
    if not labelled:
        notes.append(
            f"token labels omitted: {max(len(q_tokens), len(k_tokens))} tokens do not fit "
            "in a panel; draw one head with viz.heatmap"
        )
    bar_shrink = min(0.9, max(0.35, 3.0 / rows))
    colorbar(fig, mappable, drawn, label, scale, shrink=bar_shrink, aspect=25, pad=0.01)
    fig.supxlabel("\n".join(notes), fontsize=NOTE_PT)
    fig.suptitle(wrap(title, size[0], 10.0), fontsize=10)
    return fig
