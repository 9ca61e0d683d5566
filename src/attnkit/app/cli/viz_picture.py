"""What ``attnkit viz`` draws: the figure for an image, the page for an ``.html`` file.

Images (one text), by ``--view``:

- ``head`` (default) and ``heatmap``: chosen by ``--layer``/``--head``: one heatmap, a
  grid of a layer's heads, a head (or the heads' mean/max) in every layer, or every
  layer x head;
- ``model``: every layer x head (:func:`attnkit.viz.overview`);
- ``rollout``: attention rollout through ``--layer`` (:func:`attnkit.viz.rollout`);
- ``flow``: attention flow through ``--layer`` (:func:`attnkit.viz.attention_flow`);
- ``neuron``: refused before any work (it is interactive: write an ``.html`` file).

The page (every text a sentence) gets every layer, head and view, ``--view`` first.
"""

from __future__ import annotations

import argparse
from typing import Any

from attnkit.errors import ParameterError

__all__ = ["FLOW_TOKENS", "VIEWS", "Missing", "page", "picture"]

#: ``--view`` choices ("lines" is accepted too, as the head view's former name).
VIEWS = ("head", "heatmap", "model", "neuron", "rollout", "flow")
#: :func:`attnkit.viz.attention_flow` computes up to this many tokens by default.
FLOW_TOKENS = 64


class Missing(Exception):
    """An optional dependency is not installed (exit status 1, with the install command)."""


def _title(args: argparse.Namespace, model: str) -> str:
    if args.title:
        return args.title
    short = model.rstrip("/").split("/")[-1]
    if len(args.text) > 1:
        return f"{short}: {len(args.text)} texts"
    text = args.text[0]
    return f"{short}: {text if len(text) <= 80 else text[:77] + '...'}"


def _name(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "..."


def page(args: argparse.Namespace, captured: list[Any]) -> tuple[Any, str]:
    """The interactive page of every captured text, and a description of it."""
    from attnkit import viz

    N = captured[0].weights.shape[0]
    view = args.view or "head"
    if view == "neuron":
        why = sorted({c.vectors_note for c in captured if c.queries is None})
        if why:
            raise ParameterError(
                f"--view neuron needs the query and key vectors, which {captured[0].model} "
                f"cannot give: {'; '.join(why)}; pick another --view"
            )
    layer = args.layer if args.layer is not None else 0
    if view == "rollout":
        layer = args.layer if args.layer is not None else N - 1
    elif view == "flow":
        layer = 0  # the page has the flow through the last layer
    head: Any = args.head if args.head is not None else "all"
    options: dict[str, Any] = {
        "title": _title(args, captured[0].model),
        "layer": layer,
        "head": head,
        "view": view,
        "color_scale": args.color_scale,
    }
    if view == "flow":
        longest = max(len(c.tokens) for c in captured)
        if longest > FLOW_TOKENS:
            raise ParameterError(_too_long_for_flow(longest))
        options["flow"] = True  # asked for: computed past the page's default length
    sentences = []
    for text, c in zip(args.text, captured, strict=True):
        one: dict[str, Any] = {"weights": c.weights, "tokens": c.tokens, "name": _name(text)}
        if c.queries is not None:
            one.update(queries=c.queries, keys=c.keys, scale=c.scale)
        sentences.append(one)
    what = "interactive page (every layer and head; head, heatmap, model, neuron, rollout "
    what += "and flow views)"
    if len(sentences) == 1:
        one = sentences[0]
        one.pop("name")
        return viz.AttentionView(one.pop("weights"), one.pop("tokens"), **one, **options), what
    view_ = viz.AttentionView.batch(sentences, **options)
    return view_, f"{what}, {len(sentences)} sentences"


def picture(args: argparse.Namespace, captured: Any) -> tuple[Any, str]:
    """The figure the arguments ask for, and a description of it."""
    from attnkit import viz

    w, tokens = captured.weights, captured.tokens  # (N, H, L, L)
    N = w.shape[0]
    title = _title(args, captured.model)
    style = {"color_scale": args.color_scale}
    layer, head = args.layer, args.head if args.head is not None else "all"
    layers = [f"layer {n}" for n in range(N)]
    if args.view == "model":
        return viz.overview(w, tokens, title=title, **style), "every layer x head"
    if args.view in ("rollout", "flow"):
        last = N - 1 if layer is None else layer
        how = head if head in ("mean", "max") else "mean"
        if args.view == "rollout":
            what = f"attention rollout through layer {last} ({how} of heads, 0.5 W + 0.5 I)"
            matrix = viz.rollout(w[: last + 1], head=how)  # (L, L)
        else:
            what = f"attention flow through layer {last} ({how} of heads, 0.5 W + 0.5 I)"
            matrix = _flow(w[: last + 1], how)  # (L, L)
        return viz.heatmap(matrix, tokens, title=f"{title}\n{what}", cmap="Purples", **style), what
    if head == "all" and layer is None:
        return viz.overview(w, tokens, title=title, **style), "every layer x head"
    if head == "all":
        what = f"every head of layer {layer}"
        return viz.head_grid(w[layer], tokens, title=f"{title}\nlayer {layer}", **style), what
    if head in ("mean", "max") and layer is None:
        what = f"the {head} of the heads, per layer"
        per_layer = viz.aggregate(w, "heads", head)  # (N, L, L)
        figure = viz.head_grid(per_layer, tokens, title=f"{title}\n{what}", names=layers, **style)
        return figure, what
    if head in ("mean", "max"):
        what = f"the {head} of the heads of layer {layer}"
        matrix = viz.aggregate(w[layer], "heads", head)  # (L, L)
        return viz.heatmap(matrix, tokens, title=f"{title}\n{what}", **style), what
    if layer is None:
        what = f"head {head} in every layer"
        figure = viz.head_grid(w[:, head], tokens, title=f"{title}\n{what}", names=layers, **style)
        return figure, what
    what = f"layer {layer}, head {head}"
    return viz.heatmap(w[layer, head], tokens, title=f"{title}\n{what}", **style), what


def _flow(weights: Any, how: str) -> Any:
    """Attention flow (L, L) of ``weights`` (N, H, L, L), or an attnkit error saying why not."""
    from attnkit import viz

    flow = getattr(viz, "attention_flow", None)
    if flow is None:
        raise Missing(
            "this attnkit has no attnkit.viz.attention_flow; upgrade attnkit, or use --view rollout"
        )
    L = weights.shape[-1]
    if L > FLOW_TOKENS:
        raise ParameterError(_too_long_for_flow(L))
    return flow(weights.numpy(), head=how)  # (L, L)


def _too_long_for_flow(L: int) -> str:
    return (
        f"the attention flow is computed up to {FLOW_TOKENS} tokens (a max-flow per token "
        f"pair, about N L^4 work) and a text has {L}; truncate it with --max-tokens "
        f"{FLOW_TOKENS}, or use --view rollout"
    )
