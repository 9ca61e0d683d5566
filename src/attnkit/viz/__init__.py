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

Reference
---------

`attnkit.viz` draws attention weights from NumPy, PyTorch or JAX arrays; aggregation and
rollout are array-API code (the result stays in the input's library, under `jax.jit`
too), pictures are matplotlib figures made without pyplot (headless), and the
interactive page is one self-contained HTML file.

.. code-block:: python

    import numpy as np
    import attnkit as ak
    from attnkit import viz

    rng = np.random.default_rng(0)
    tokens = "the cat sat on the mat".split()
    q, k, v = (rng.standard_normal((2, 4, 6, 16)) for _ in range(3))  # 2 layers x 4 heads
    _, w = ak.scaled_dot_product_attention(q, k, v, return_weights=True)  # (2, 4, 6, 6)

    viz.aggregate(w, over="heads", how="mean")  # (2, L, L); over="layers" or "all"; how="max"
    viz.rollout(w)  # (L, L): Abnar & Zuidema 2020, 0.5 W + 0.5 I per layer, rows renormalised
    viz.save(viz.heatmap(w[1, 3], tokens), "head.png")  # one head: .png, .svg or .pdf
    viz.save(viz.head_grid(w[1], tokens), "layer1.svg")  # every head of one layer
    viz.save(viz.overview(w, tokens, color_scale="sqrt"), "all.pdf")  # layers x heads
    viz.attention_flow(w)  # (L, L) NumPy: max-flow from each input token to each output token
    page = viz.AttentionView(w, tokens, queries=q, keys=k, scale=16**-0.5)  # + neuron view
    viz.save(page, "attention.html")  # the interactive page, every view

A real model's weights and vectors: ``attnkit viz "TEXT" --out attention.html`` captures
them from the bundled all-MiniLM-L6-v2 (or ``--model`` a local Hugging Face folder).

| function | takes | gives |
|---|---|---|
| `aggregate(w, over, how)` | `(..., N, H, L, S)` or a list of N layers `(..., H, L, S)` | mean or max over `"heads"`, `"layers"` or `"all"` |
| `rollout(w, residual=0.5, head="mean", all_layers=False)` | self-attention `(..., N, H, L, L)` or a list of layers | `(..., L, L)`, or every depth `(..., N, L, L)`; rows sum to 1 |
| `attention_flow(w, residual=0.5, head="mean", all_layers=False)` | self-attention `(N, H, L, L)`, up to `max_tokens=64` | `(L, L)` NumPy (or `(N, L, L)`): the max-flow from each input token to each output token (Abnar & Zuidema 2020) |
| `heatmap(w, tokens)` | `(L, S)` (leading axes of size 1 dropped) | a `matplotlib.figure.Figure` with token labels and a colour bar in weight units (`colorbar_label=`) |
| `head_grid(w, tokens)` / `overview(w, tokens)` | `(H, L, S)` / `(N, H, L, S)` | a grid of panels with one colour bar: `scale="panel"` (default, each panel 0 .. its maximum) or `"shared"` (one scale), stated on the figure; token labels where they fit, a note where they do not |
| `AttentionView(w, tokens, queries=, keys=)`, `to_html(...)` | `(N, H, L, S)`, a list of layers, `(H, L, S)` or `(L, S)`; vectors `(N, H, L, E)`, `(N, Hkv, S, E)` | the page; `.save(path)`, shows inline in Jupyter (`_repr_html_`, an iframe); `AttentionView.batch([...])` for several sentences |
| `save(picture, path)` | a figure or an `AttentionView` | the format from the extension: `.png` `.svg` `.pdf` `.html` |

`key_tokens=` labels keys that differ from the queries; `color_scale="sqrt"` brightens
weak weights. Any Hugging Face model's `output_attentions` tuple goes in as it is;
attnkit's own weights come from `return_weights=True` (`scaled_dot_product_attention`)
or `need_weights=True` (`multi_head_attention`, `attnkit.backends.torch.nn`). The
`attnkit viz` command loads its model with the attention through attnkit
(`attn_implementation="attnkit"`) when `attnkit.backends.torch.hf` registers, else
through transformers' `"eager"`, and says which.

The page is one file (no CDN, no network: script and data inline, and a
Content-Security-Policy forbidding any fetch; it works from `file://` and can be
mailed) with BertViz's three views and three more, chosen in the page or with `view=`:

| view | shows |
|---|---|
| `head` | lines from each query token to its keys, opacity = weight, one colour per head; the legend's buttons pick any subset of heads (shift-click: one alone), combined by colour (each pair in its strongest head's colour), mean or max |
| `heatmap` | the same selection, one cell per query/key pair |
| `model` | every layer x head as a thumbnail, each scaled to its own maximum (max-pooled, so a one-token pattern stays visible at 512 tokens); click one, or Enter, to open it in the head view |
| `neuron` | for one head and query token: the query vector, every key vector, their elementwise product, `scale * q . k` and the model's weight (`queries=`, `keys=`: `attnkit viz` records them) |
| `rollout` | attention rollout through each depth |
| `flow` | attention flow (Abnar & Zuidema's max-flow per token pair; computed by default up to 32 tokens, `flow=True` beyond) |

Every colour scale has a colour bar with its values (linear or square root), the heads'
colours a legend; several sentences go in one page with `AttentionView.batch([...])`
and a selector. Keys: left/right head, up/down layer, `[` `]` query token, `1`-`6`
view, `a` all heads, `n`/`p` sentence; in the model view the arrows move and Enter
opens. Weights and vectors are stored at 8 bits (relative to each head's maximum),
deflated; ``attnkit bench --viz`` times the page in headless Chromium (figures:
``help(attnkit.app.bench)``).

Beyond 12,000 links the lines view draws the strongest 12,000 and says so. The tests
drive the page in real headless Chromium (`tests/test_viz_page.py`): every view draws
something different with its colour bar and legend, the legend's subsets, the model
view's click and keys, the keyboard, the neuron view's scores against NumPy, a 512-token
x 12 x 12 page in every view, no console error, and the only request is the file itself
(a control page shows the check sees requests).

From the command line (the "models" extra; `--help` lists everything):

::

    attnkit viz "TEXT" --out attention.html                  # the interactive page
    attnkit viz "TEXT" "ANOTHER TEXT" --out batch.html       # several texts: a sentence selector
    attnkit viz "TEXT" --out all.png                         # every layer x head
    attnkit viz "TEXT" --layer 2 --out layer2.svg            # every head of layer 2
    attnkit viz "TEXT" --layer 2 --head 11 --out head.pdf    # one head
    attnkit viz "TEXT" --head mean --out mean.png            # heads averaged, per layer (or max)
    attnkit viz "TEXT" --view rollout [--layer N] --out r.png   # rollout through layer N (last)
    attnkit viz "TEXT" --view flow --out flow.png            # attention flow (up to 64 tokens)
    attnkit viz "TEXT" --out a.html --view neuron --layer 3 --head 5   # what the page shows first
    attnkit viz "TEXT" --model ./my-llama --out llama.html   # any local Hugging Face model folder
    attnkit viz "TEXT" --model ./gpt2 --attn-implementation eager --out gpt2.png

`--model minilm` (the default) or a local Hugging Face model folder, encoder or decoder
(the tokenizer's extra outputs that the model's `forward` does not take, such as a
Llama tokenizer's `token_type_ids`, are dropped); `--attn-implementation` (default
attnkit when it registers and gives the weights, else eager; `sdpa` gives none);
`--view head|heatmap|model|neuron|rollout|flow` (`neuron` is the page's); `--max-tokens`
truncates (default: none; a text longer than the model's context is an error that says
the limit), `--color-scale sqrt`, `--title`, `--dpi`. The page records the query and key
vectors the scores are made of (after RoPE, GQA key heads repeated) for the neuron view,
through transformers' attention interface; a family that does not go through it gets a
page without the neuron view, and the CLI says why. Every argument is checked before the
model loads, with exit status 2 and the valid range (`--layer 6 is out of range:
sentence-transformers/all-MiniLM-L6-v2 has 6 layers, valid 0..5`), or 1 and the install
command when an extra is missing (`pip install "attnkit[models]" torch`); a folder that
is not a model, a model that gives no weights and a text beyond the context are attnkit
errors (`error: ...`), never a traceback. A rich progress bar shows the steps (plain
lines without rich or a terminal, or with `--plain`).

MiniLM on a sample sentence, every head of layer 2, and the rollout through all six
layers (square-root colour scale), made with:

::

    attnkit viz "The animal didn't cross the street because it was too tired." --layer 2 \\
        --dpi 100 --out src/attnkit/viz/gallery/minilm_layer2_heads.png
    attnkit viz "The animal didn't cross the street because it was too tired." --rollout \\
        --color-scale sqrt --dpi 100 --out src/attnkit/viz/gallery/minilm_rollout.png

The pictures: ``src/attnkit/viz/gallery/minilm_layer2_heads.png`` and
``src/attnkit/viz/gallery/minilm_rollout.png``.

In layer 2, head 11 looks at the previous token (0.29 of its weight on average), head 8
at the next one (0.28), heads 7 and 9 at `[CLS]` (0.87, 0.85). Through all six layers
(the rollout) `[CLS]` holds 0.60 of every token's mix, `[SEP]` 0.09 and the token
itself 0.08.

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
