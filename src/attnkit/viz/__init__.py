"""See attention: heatmaps, head grids, aggregation, attention rollout, an interactive page.

Arrays from NumPy, PyTorch or JAX (anything with an attnkit backend adapter)::

    from attnkit import viz

    # weights: (N, H, L, S), or Hugging Face's output_attentions tuple of N (1, H, L, S)
    viz.aggregate(weights, over="heads", how="mean")  # (N, L, S); also "layers", "all", "max"
    viz.rollout(weights)  # (L, L): Abnar & Zuidema 2020, residual 0.5 W + 0.5 I
    fig = viz.heatmap(weights[0][0, 3], tokens)  # one head -> matplotlib Figure
    fig = viz.head_grid(weights[0], tokens)  # every head of layer 0
    fig = viz.overview(weights, tokens)  # layers x heads
    viz.save(fig, "attention.png")  # .png, .svg, .pdf
    view = viz.AttentionView(weights, tokens)  # interactive, self-contained page
    viz.save(view, "attention.html")  # or view.to_html(); shows inline in Jupyter

Aggregation and rollout are array-API code of the math (:mod:`attnkit.rollout`,
re-exported here; they return the inputs' library); pictures need matplotlib
(``pip install "attnkit[viz]"``); the HTML page needs nothing. ``attnkit.viz`` is
application code (pictures and the page) on top of the math and the backends.
"""

from __future__ import annotations

from attnkit.rollout import AGGREGATES, aggregate, rollout

from .flow import attention_flow
from .html import VIEWS, AttentionView, to_html
from .plots import COLOR_SCALES, FIGURE_FORMATS, GRID_SCALES, head_grid, heatmap, overview, save

__all__ = [
    "AGGREGATES",
    "COLOR_SCALES",
    "FIGURE_FORMATS",
    "GRID_SCALES",
    "VIEWS",
    "AttentionView",
    "aggregate",
    "attention_flow",
    "head_grid",
    "heatmap",
    "overview",
    "rollout",
    "save",
    "to_html",
]
