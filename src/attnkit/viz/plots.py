"""Pictures of attention weights: a heatmap, a grid of heads, a layers x heads overview.

Weights from NumPy, PyTorch (any device, with ``requires_grad`` too) or JAX are validated
here and converted to NumPy; the drawing is :mod:`attnkit.viz.figures` and
:mod:`attnkit.viz.figures_grid`, imported only when a picture is asked for. Each function
returns a ``matplotlib.figure.Figure`` made without pyplot, with a colour bar in the
weights' units.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
from pathlib import Path
from types import ModuleType
from typing import Any

from attnkit import backends
from attnkit.errors import ArgumentTypeError, ParameterError
from attnkit.shapes import type_name

from ._checks import as_weights, check_choice, check_tokens, squeeze_to

__all__ = [
    "COLOR_SCALES",
    "FIGURE_FORMATS",
    "GRID_SCALES",
    "MATPLOTLIB_HINT",
    "head_grid",
    "heatmap",
    "overview",
    "save",
]

#: File extensions :func:`save` writes a figure as (``.html`` takes an AttentionView).
FIGURE_FORMATS = ("png", "svg", "pdf")
#: Colour scales: proportional to the weight, or to its square root (weak weights show).
COLOR_SCALES = ("linear", "sqrt")
#: Colour ranges of the grids: each panel 0 to its own maximum, or one range for all.
GRID_SCALES = ("panel", "shared")
MATPLOTLIB_HINT = 'pip install matplotlib  (or: pip install "attnkit[viz]")'


def _plot(module: str = "figures") -> ModuleType:
    if importlib.util.find_spec("matplotlib") is None:
        raise ModuleNotFoundError(
            f"attnkit.viz draws pictures with matplotlib, which is not installed: "
            f"{MATPLOTLIB_HINT}. (attnkit.viz.to_html needs nothing.)"
        )
    return importlib.import_module(f"attnkit.viz.{module}")


def to_numpy(xp: Any, x: Any) -> Any:
    """``x`` as a NumPy array, through the backend adapter of its namespace."""
    try:
        adapter = backends.for_namespace(xp)
    except TypeError as exc:
        raise ArgumentTypeError(str(exc)) from None
    return adapter.to_numpy(x)


def _tokens(tokens: Any, key_tokens: Any, L: int, S: int) -> tuple[list[str], list[str]]:
    q = check_tokens("tokens", tokens, L, "queries (axis -2)")
    if key_tokens is None and tokens is not None and L == S:
        return q, q
    return q, check_tokens("key_tokens", key_tokens, S, "keys (axis -1)")


def heatmap(
    weights: Any,
    tokens: Any = None,
    *,
    key_tokens: Any = None,
    title: str = "attention weights",
    cmap: str = "Blues",
    color_scale: str = "linear",
    colorbar_label: str = "attention weight",
) -> Any:
    """One attention matrix as a heatmap: queries down, keys across, token labels.

    Args:
        weights: ``(L, S)``; leading axes of size 1 are dropped, so one head of a
            Hugging Face layer, ``attentions[layer][0, head]`` or ``[:, head:head+1]``,
            works as it is. Use :func:`attnkit.viz.aggregate` or :func:`rollout` first to
            show a summary of many heads.
        tokens: L query labels (default: positions); also the key labels when S == L.
        key_tokens: S key labels, when the keys differ from the queries.
        title, cmap: the figure title and a matplotlib colormap name.
        color_scale: ``"linear"`` or ``"sqrt"`` (colour by the square root of the
            weight: weak weights show, useful when one position takes most weight).
        colorbar_label: what the colour bar measures (e.g. ``"rollout: share of key in
            query"`` for :func:`attnkit.viz.rollout`).

    Returns:
        ``matplotlib.figure.Figure``; the colour runs from 0 to the matrix maximum and the
        colour bar shows that range in the matrix's units.
    """
    check_choice("color_scale", color_scale, COLOR_SCALES)
    _check_label(colorbar_label)
    xp, w = as_weights("weights", weights)
    w = squeeze_to(
        "weights",
        xp,
        w,
        2,
        "(L, S)",
        "select one head (w[..., head, :, :]) or reduce the heads first (attnkit.viz.aggregate).",
    )
    q, k = _tokens(tokens, key_tokens, *w.shape)
    matrix = to_numpy(xp, w)  # (L, S)
    return _plot().heatmap_figure(matrix, q, k, title, cmap, color_scale, colorbar_label)


def head_grid(
    weights: Any,
    tokens: Any = None,
    *,
    key_tokens: Any = None,
    title: str = "attention per head",
    columns: int | None = None,
    names: Any = None,
    cmap: str = "Blues",
    color_scale: str = "linear",
    scale: str = "panel",
) -> Any:
    """Every head of one layer, one panel each, in a grid, with one colour bar.

    Args:
        weights: ``(H, L, S)``; leading axes of size 1 are dropped (a Hugging Face layer
            ``(1, H, L, S)`` works as it is).
        tokens, key_tokens: as for :func:`heatmap`; drawn on the outer panels where one
            label per token fits at 6.5 pt, else a note on the figure says they were left
            out.
        columns: panels per row (default: about sqrt(H)).
        names: H panel titles (default ``"head 0"``, ``"head 1"``, ...).
        color_scale: ``"linear"`` or ``"sqrt"``, as for :func:`heatmap`.
        scale: ``"panel"`` (default, as BertViz: each panel from 0 to its own maximum, so
            weak heads stay visible; the colour bar reads "weight / the panel's maximum")
            or ``"shared"`` (one range, 0 to the largest weight of all panels, so heads
            can be compared; the colour bar is in weight units).

    Returns:
        ``matplotlib.figure.Figure`` with one colour bar and a note stating the scale.
    """
    check_choice("color_scale", color_scale, COLOR_SCALES)
    check_choice("scale", scale, GRID_SCALES)
    xp, w = as_weights("weights", weights)
    w = squeeze_to("weights", xp, w, 3, "(H, L, S)", "pass one layer's heads.")
    H, L, S = w.shape
    names = check_tokens("names", names, H, "heads") if names is not None else None
    names = names or [f"head {h}" for h in range(H)]
    if columns is not None and (
        isinstance(columns, bool) or not isinstance(columns, int) or columns < 1
    ):
        raise ParameterError(f"columns must be a positive int, got {columns!r}.")
    cols = columns or max(1, math.ceil(math.sqrt(H)))
    rows = max(1, math.ceil(H / cols))
    q, k = _tokens(tokens, key_tokens, L, S)
    np_w = to_numpy(xp, w)  # (H, L, S)
    cells = [
        [(names[i], np_w[i]) if i < H else None for i in range(r * cols, (r + 1) * cols)]
        for r in range(rows)
    ]
    return _plot("figures_grid").grid_figure(cells, None, q, k, title, cmap, color_scale, scale)


def overview(
    weights: Any,
    tokens: Any = None,
    *,
    key_tokens: Any = None,
    title: str = "attention: layers x heads",
    cmap: str = "Blues",
    color_scale: str = "linear",
    scale: str = "panel",
) -> Any:
    """Every head of every layer: one row per layer, one column per head, one colour bar.

    Sized for print: 12 layers x 12 heads make a figure about 12 inches wide, panel
    titles at 7.5 pt and token labels at 6.5 pt (query labels down the first column, key
    labels under the bottom row) where one label per token fits in a panel, else a note
    "token labels omitted: ... draw one head with viz.heatmap".

    Args:
        weights: ``(N, H, L, S)`` or a list of N layers ``(H, L, S)`` (Hugging Face's
            ``output_attentions`` tuple of ``(1, H, L, S)`` works as it is).
        tokens, key_tokens: as for :func:`heatmap`.
        color_scale: ``"linear"`` or ``"sqrt"``, as for :func:`heatmap`.
        scale: ``"panel"`` (default) or ``"shared"``, as for :func:`head_grid`.

    Returns:
        ``matplotlib.figure.Figure`` with one colour bar and a note stating the scale.
    """
    check_choice("color_scale", color_scale, COLOR_SCALES)
    check_choice("scale", scale, GRID_SCALES)
    xp, w = as_weights("weights", weights)
    w = squeeze_to("weights", xp, w, 4, "(N, H, L, S)", "pass one sequence's layers.")
    N, H, L, S = w.shape
    q, k = _tokens(tokens, key_tokens, L, S)
    np_w = to_numpy(xp, w)  # (N, H, L, S)
    cells = [[(f"head {h}" if n == 0 else "", np_w[n, h]) for h in range(H)] for n in range(N)]
    rows = [f"layer {n}" for n in range(N)]
    return _plot("figures_grid").grid_figure(cells, rows, q, k, title, cmap, color_scale, scale)


def _check_label(label: Any) -> None:
    if not isinstance(label, str):
        raise ArgumentTypeError(
            f"colorbar_label must be a str (what the colour measures), got {type_name(label)}."
        )


def save(picture: Any, path: str | Path, *, dpi: int = 150) -> Path:
    """Write a figure (``.png``, ``.svg``, ``.pdf``) or an AttentionView (``.html``).

    The format is the file extension. Returns the path written.
    """
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    is_view = hasattr(picture, "to_html") and hasattr(picture, "_repr_html_")
    if fmt == "html":
        if not is_view:
            raise ParameterError(
                f"{path} is an .html file, which holds an interactive attnkit.viz."
                f"AttentionView, not a {type_name(picture)}; build one with "
                "attnkit.viz.AttentionView(weights, tokens)."
            )
        path.write_text(picture.to_html(), encoding="utf-8")
        return path
    if fmt not in FIGURE_FORMATS:
        raise ParameterError(
            f"cannot tell the format of {path}: the extension must be one of "
            f".{', .'.join(FIGURE_FORMATS)} or .html."
        )
    if not hasattr(picture, "savefig"):
        raise ArgumentTypeError(
            f"save writes a matplotlib Figure to .{fmt}, got {type_name(picture)}; "
            "draw one with attnkit.viz.heatmap, head_grid or overview."
        )
    _plot().save_figure(picture, path, fmt, dpi)
    return path
