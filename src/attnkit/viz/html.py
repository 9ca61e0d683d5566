"""A self-contained interactive HTML page of attention: BertViz's views and more.

One file, no network: script, style and data (:mod:`.page_data`) inline. In Jupyter
:class:`AttentionView` shows itself inline (``_repr_html_``).

Views (``view=``, or chosen in the page): ``"head"`` (lines from each query token to its
keys, opacity = weight), ``"heatmap"``, ``"model"`` (every layer x head), ``"neuron"``
(one head's query and key vectors and ``scale * q . k``; needs ``queries`` and
``keys``), ``"rollout"`` and ``"flow"``. Several sentences: :meth:`AttentionView.batch`.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from attnkit import __version__
from attnkit.errors import ArgumentTypeError, ParameterError, ShapeError
from attnkit.shapes import type_name

from ._checks import check_choice
from .page_sentence import FLOW_TOKENS, sentence_data
from .plots import COLOR_SCALES

__all__ = ["FLOW_TOKENS", "VIEWS", "AttentionView", "to_html"]

#: The page's views (``"lines"`` is accepted as the head view's former name).
VIEWS = ("head", "heatmap", "model", "neuron", "rollout", "flow")
_SCRIPTS = ("page_core", "page_lines", "page_heat", "page_model", "page_neuron", "page_main")
_COMBINE = {"all": "colour", "mean": "mean", "max": "max"}
_SENTENCE_KEYS = {"weights", "tokens", "key_tokens", "queries", "keys", "scale", "name"}


def _index(name: str, value: Any, count: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < count:
        raise ParameterError(f"{name} must be an int in 0..{count - 1} ({what}), got {value!r}.")
    return value


class AttentionView:
    """An interactive page of attention weights: ``save("view.html")``, or show in Jupyter.

    Args:
        weights: ``(N, H, L, S)``, a list of N layers ``(H, L, S)`` (Hugging Face
            ``output_attentions`` works as it is: leading axes of size 1 are dropped),
            one layer ``(H, L, S)`` or one head ``(L, S)``; NumPy, PyTorch or JAX.
        tokens: L query labels (default positions); also the key labels when S == L.
        key_tokens: S key labels, when the keys are other tokens.
        queries, keys: the neuron view's vectors, ``(N, H, L, E)`` and ``(N, Hkv, S, E)``
            (H a multiple of Hkv), as the scores use them (after rotary embeddings).
        scale: the score's factor, ``score = scale * q . k``; default ``1/sqrt(E)``.
        title: the page title.
        rollout: include the attention rollout; default: when L == S.
        flow: include the attention flow; default: when L == S <= :data:`FLOW_TOKENS`.
        layer: the layer shown first (default 0); for the rollout and flow views their
            depth (default: through the last layer).
        head: the head shown first, or ``"all"`` (every head, by colour), ``"mean"``,
            ``"max"``.
        heads: a subset of heads shown first (combined as ``head`` says, default by
            colour), instead of ``head``.
        view: the view shown first, one of :data:`VIEWS`.
        query: the neuron view's first query token.
        color_scale: ``"linear"`` (colour proportional to the weight) or ``"sqrt"``
            (brightens weak weights: long inputs); the page can switch it.
        compress: deflate the data (the page then needs DecompressionStream: Chrome 80,
            Firefox 113, Safari 16.4 or newer); False makes a larger page for any browser.
        name: the sentence's name in the page (several sentences: :meth:`batch`).
    """

    def __init__(
        self,
        weights: Any,
        tokens: Any = None,
        *,
        key_tokens: Any = None,
        queries: Any = None,
        keys: Any = None,
        scale: float | None = None,
        title: str = "attention",
        rollout: bool | None = None,
        flow: bool | None = None,
        layer: int | None = None,
        head: int | str = 0,
        heads: Sequence[int] | None = None,
        view: str = "head",
        query: int = 0,
        color_scale: str = "linear",
        compress: bool = True,
        name: str | None = None,
    ) -> None:
        one = {"weights": weights, "tokens": tokens, "key_tokens": key_tokens}
        one.update(queries=queries, keys=keys, scale=scale, name=name)
        self._build([one], title, rollout, flow, compress)
        self._initial(0, layer, head, heads, view, query, color_scale)

    @classmethod
    def batch(
        cls,
        sentences: Sequence[dict[str, Any]],
        *,
        names: Sequence[str] | None = None,
        title: str = "attention",
        rollout: bool | None = None,
        flow: bool | None = None,
        sentence: int = 0,
        layer: int | None = None,
        head: int | str = 0,
        heads: Sequence[int] | None = None,
        view: str = "head",
        query: int = 0,
        color_scale: str = "linear",
        compress: bool = True,
    ) -> AttentionView:
        """One page for several sentences, selectable in the page (keys ``n``/``p``).

        Each sentence is a dict with ``weights`` and optionally ``tokens``, ``key_tokens``,
        ``queries``, ``keys``, ``scale``, ``name`` (the arguments of one view); the
        sentences may differ in length (no padding needed) but not in layers and heads.
        ``names`` (default: each dict's ``name``, else ``"sentence i"``) label them;
        ``sentence`` is the one shown first. The other options are the constructor's.
        """
        if isinstance(sentences, (str, dict)) or not isinstance(sentences, Sequence):
            raise ArgumentTypeError(
                "sentences must be a list of dicts (weights=..., tokens=..., ...), got "
                f"{type_name(sentences)}."
            )
        if not sentences:
            raise ShapeError("sentences is empty; pass at least one sentence's weights.")
        items = []
        for i, item in enumerate(sentences):
            if not isinstance(item, dict) or "weights" not in item:
                raise ArgumentTypeError(
                    f"sentences[{i}] must be a dict with at least 'weights', got "
                    f"{type_name(item)}"
                    + (f" with keys {sorted(item)}" if isinstance(item, dict) else "")
                    + "."
                )
            unknown = set(item) - _SENTENCE_KEYS
            if unknown:
                raise ParameterError(
                    f"sentences[{i}] has unknown keys {sorted(unknown)}; the keys are weights, "
                    "tokens, key_tokens, queries, keys, scale, name."
                )
            items.append(dict(item))
        if names is not None:
            if isinstance(names, str) or len(names) != len(items):
                raise ShapeError(
                    f"names must be a list of {len(items)} strings (one per sentence), got "
                    f"{names!r}."
                )
            for item, label in zip(items, names, strict=True):
                item["name"] = str(label)
        view_ = cls.__new__(cls)
        view_._build(items, title, rollout, flow, compress)
        start = _index("sentence", sentence, len(items), "the sentence shown first")
        view_._initial(start, layer, head, heads, view, query, color_scale)
        return view_

    def _build(
        self, items: list[dict[str, Any]], title: Any, rollout: Any, flow: Any, compress: Any
    ) -> None:
        self.title = str(title)
        self._sentences = []
        shapes = []
        for i, item in enumerate(items):
            label = item.pop("name", None) or (f"sentence {i}" if len(items) > 1 else "text")
            data, shape = sentence_data(
                **item, name=str(label), rollout=rollout, flow=flow, compress=bool(compress)
            )
            if shapes and shape[:2] != shapes[0][:2]:
                raise ShapeError(
                    f"sentence {i} has {shape[0]} layers x {shape[1]} heads but sentence 0 "
                    f"has {shapes[0][0]} x {shapes[0][1]}; one page shows one model."
                )
            self._sentences.append(data)
            shapes.append(shape)
        self._shapes = shapes
        self.shape = shapes[0]
        self._encoding = "u8-deflate" if compress else "u8"

    def _initial(
        self,
        sentence: int,
        layer: Any,
        head: Any,
        heads: Any,
        view: Any,
        query: Any,
        color_scale: Any,
    ) -> None:
        N, H, L, _ = self._shapes[sentence]
        data = self._sentences[sentence]
        view = "head" if view == "lines" else view
        check_choice("view", view, VIEWS)
        check_choice("color_scale", color_scale, COLOR_SCALES)
        if view == "neuron" and data["vectors"] is None:
            raise ParameterError(
                "view='neuron' needs the query and key vectors: pass queries (N, H, L, E) "
                "and keys (N, Hkv, S, E) (attnkit viz records them)."
            )
        missing = {"rollout": data["rollout"] is None, "flow": not data["flow"].get("data")}
        if missing.get(view):
            why = data["flow"].get("note", "") if view == "flow" else "it needs L == S"
            raise ParameterError(f"view={view!r} is not in this page ({why}); pick another view.")
        depths = N if view == "rollout" else len(data["flow"].get("heads", [])) or 1
        depth = N - 1  # the rollout through the last layer; the page clamps it for the flow
        if view in ("rollout", "flow"):
            depth = depths - 1 if layer is None else layer
            depth = _index("layer", depth, depths, f"the {view}'s depth")
        else:
            layer = 0 if layer is None else layer
            _index("layer", layer, N, f"the weights have {N} layer(s)")
        combine = "colour"
        if heads is not None:
            if isinstance(heads, (str, bytes)) or not isinstance(heads, Sequence):
                raise ArgumentTypeError(f"heads must be a list of head indices, got {heads!r}.")
            chosen = sorted({_index("heads[...]", h, H, f"{H} heads") for h in heads})
            if head in _COMBINE:
                combine = _COMBINE[head]
        elif isinstance(head, str):
            check_choice("head", head, tuple(_COMBINE))
            chosen, combine = list(range(H)), _COMBINE[head]
        else:
            if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < H:
                raise ParameterError(
                    f"head must be an int in 0..{H - 1} or one of 'mean', 'max', 'all', "
                    f"got {head!r}."
                )
            chosen = [head]
        q = _index("query", query, max(L, 1), f"{L} query tokens")
        self._start = {
            "sentence": sentence,
            "view": view,
            "layer": 0 if view in ("rollout", "flow") else layer,
            "depth": depth,
            "heads": chosen,
            "combine": combine,
            "query": q,
            "focus": [0 if view in ("rollout", "flow") else layer, chosen[0] if chosen else 0],
            "scale": color_scale,
        }

    @property
    def _payload(self) -> dict[str, Any]:
        return {
            "version": 2,
            "encoding": self._encoding,
            "sentences": self._sentences,
            "initial": self._start,
        }

    def to_html(self) -> str:
        """The whole page as one string (UTF-8 text, no external references)."""
        files = resources.files(__package__)
        page = files.joinpath("page.html").read_text(encoding="utf-8")
        parts = [files.joinpath(f"{name}.js").read_text(encoding="utf-8") for name in _SCRIPTS]
        script = '(function () {\n"use strict";\n' + "\n".join(parts) + "\n})();"
        # "<" escaped: no token can close the <script> element that holds the data.
        payload = json.dumps(self._payload, ensure_ascii=False).replace("<", "\\u003c")
        return (
            page.replace("__ATTNKIT_TITLE__", html.escape(self.title))
            .replace("__ATTNKIT_VERSION__", __version__)
            .replace("__ATTNKIT_SCRIPT__", script)
            .replace("__ATTNKIT_DATA__", payload)
        )

    def save(self, path: str | Path) -> Path:
        """Write the page to ``path`` (conventionally ``.html``); returns the path."""
        path = Path(path)
        path.write_text(self.to_html(), encoding="utf-8")
        return path

    def _repr_html_(self) -> str:
        """Jupyter's inline display: the page in an iframe (its own scripts and ids)."""
        L, S = self.shape[2:]
        height = min(900, 220 + 16 * max(L, S))
        return (
            f'<iframe srcdoc="{html.escape(self.to_html(), quote=True)}" '
            f'style="width: 100%; height: {height}px; border: 0" '
            f'title="{html.escape(self.title)}"></iframe>'
        )

    def __repr__(self) -> str:
        N, H, L, S = self.shape
        more = f", sentences={len(self._sentences)}" if len(self._sentences) > 1 else ""
        return f"AttentionView({self.title!r}, layers={N}, heads={H}, L={L}, S={S}{more})"


def to_html(weights: Any, tokens: Any = None, **options: Any) -> str:
    """The interactive page of ``weights`` as a string: ``AttentionView(...).to_html()``.

    Takes the same arguments as :class:`AttentionView`.
    """
    return AttentionView(weights, tokens, **options).to_html()
