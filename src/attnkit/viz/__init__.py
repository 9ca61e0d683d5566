"""See attention: heatmaps, head grids, aggregation, attention rollout, an interactive page.

Weights come from NumPy, PyTorch or JAX arrays. Aggregation and rollout are the math's
(:mod:`attnkit.rollout`); pictures are matplotlib figures (``pip install
"attnkit[viz]"``); the interactive page is one self-contained HTML file (:mod:`.html`).

.. code-block:: python

    import numpy as np
    import attnkit as ak
    from attnkit import viz

    rng = np.random.default_rng(0)
    tokens = "the cat sat on the mat".split()
    q, k, v = (rng.standard_normal((2, 4, 6, 16)) for _ in range(3))  # 2 layers x 4 heads
    _, w = ak.scaled_dot_product_attention(q, k, v, return_weights=True)  # (2, 4, 6, 6)

    viz.rollout(w)  # (L, L): Abnar & Zuidema 2020, 0.5 W + 0.5 I per layer, rows renormalised
    viz.save(viz.overview(w, tokens, color_scale="sqrt"), "all.pdf")  # layers x heads
    page = viz.AttentionView(w, tokens, queries=q, keys=k, scale=16**-0.5)  # + neuron view
    viz.save(page, "attention.html")  # the interactive page, every view

| function | takes | gives |
|---|---|---|
| `aggregate(w, over, how)` | `(..., N, H, L, S)` or a list of N layers `(..., H, L, S)` | mean or max over `"heads"`, `"layers"` or `"all"` |
| `rollout(w, residual=0.5, head="mean", all_layers=False)` | self-attention `(..., N, H, L, L)` or a list of layers | `(..., L, L)`, or every depth `(..., N, L, L)`; rows sum to 1 |
| `attention_flow(w, residual=0.5, head="mean", all_layers=False)` | self-attention `(N, H, L, L)`, up to `max_tokens=64` | `(L, L)` NumPy (or `(N, L, L)`): the max-flow from each input token to each output token |
| `heatmap(w, tokens)` | `(L, S)` (leading axes of size 1 dropped) | a `Figure` with token labels and a colour bar |
| `head_grid(w, tokens)` / `overview(w, tokens)` | `(H, L, S)` / `(N, H, L, S)` | a grid of panels with one colour bar: `scale="panel"` (each panel 0 .. its maximum) or `"shared"` |
| `AttentionView(w, tokens, queries=, keys=)`, `to_html(...)` | `(N, H, L, S)`, a list of layers, `(H, L, S)` or `(L, S)`; vectors `(N, H, L, E)`, `(N, Hkv, S, E)` | the page; `.save(path)`, inline in Jupyter; `AttentionView.batch([...])` for several sentences |
| `save(picture, path)` | a figure or an `AttentionView` | the format from the extension: `.png` `.svg` `.pdf` `.html` |

Any Hugging Face model's `output_attentions` tuple goes in as it is. A real model's
page from the command line: ``attnkit viz "TEXT" --out attention.html``.
"""  # noqa: E501

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
