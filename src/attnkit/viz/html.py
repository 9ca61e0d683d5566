"""A self-contained interactive HTML view of attention weights.

One file, no network: the page's script and style are inline (``page.html`` and
``page.js`` next to this module), the weights are embedded as JSON. It needs no Jupyter
and no server; in Jupyter, :class:`AttentionView` shows itself inline (``_repr_html_``, in
an ``iframe`` so that several views on one page stay independent).

The page has a layer selector (every layer, plus the attention rollout when queries and
keys are the same tokens), a head selector (every head, their mean and max, and "all":
each position coloured by its strongest head), a token-to-token view (lines from each
query to the keys it attends to, opacity = weight) and a heatmap view (one cell per
query/key pair), and hover highlighting in both: hovering a token shows its strongest
links, hovering a cell its weight. At 512 tokens and more the heatmap draws about one
pixel per pair and the lines view scrolls.

Size: weights are stored at 8 bits per value (relative to each head's maximum, an error
of at most 1/510 of that maximum) and deflate-compressed; 6 layers x 12 heads at 512
tokens give a page of a few megabytes.
"""

from __future__ import annotations

import base64
import html
import json
import zlib
from importlib import resources
from pathlib import Path
from typing import Any

from attnkit import __version__
from attnkit.errors import ParameterError, ShapeError
from attnkit.rollout import rollout as _rollout
from attnkit.shapes import describe

from ._checks import as_weights, check_choice, check_tokens, squeeze_to
from .plots import COLOR_SCALES, to_numpy

__all__ = ["VIEWS", "AttentionView", "to_html"]

#: The page's two views: lines between tokens, and the heatmap.
VIEWS = ("lines", "heatmap")
_HEAD_CHOICES = ("mean", "max", "all")


def _as_stack(weights: Any) -> tuple[Any, Any]:
    """(xp, weights as (N, H, L, S)): one head (L, S) and one layer (H, L, S) are lifted."""
    xp, w = as_weights("weights", weights)
    if w.ndim in (2, 3):
        return xp, xp.reshape(w, (1,) * (4 - w.ndim) + tuple(w.shape))  # (N, H, L, S)
    fix = "pass one sequence: (N, H, L, S), one layer (H, L, S) or one head (L, S)."
    return xp, squeeze_to("weights", xp, w, 4, "(N, H, L, S)", fix)


def _quantize(xp: Any, w: Any) -> tuple[bytes, list[float]]:
    """(uint8 bytes of (heads, L, S), each head's maximum): value ~ byte / 255 * maximum."""
    w = xp.where(xp.isnan(w), xp.zeros_like(w), w)
    w = xp.where(w > 0, w, xp.zeros_like(w))  # weights are >= 0; clip stray negatives
    top = xp.max(w, axis=(-2, -1), keepdims=True)  # (H, 1, 1)
    safe = xp.where(top > 0, top, xp.ones_like(top))
    scaled = xp.round(w / safe * 255.0)  # (H, L, S) in 0 .. 255
    codes = to_numpy(xp, xp.astype(scaled, xp.uint8))
    scales = to_numpy(xp, xp.reshape(top, (-1,)))
    return codes.tobytes(), [float(s) for s in scales.tolist()]


class AttentionView:
    """An interactive page of attention weights: ``save("view.html")``, or show in Jupyter.

    Args:
        weights: ``(N, H, L, S)``, a list of N layers ``(H, L, S)`` (Hugging Face
            ``output_attentions`` works as it is: leading axes of size 1 are dropped),
            one layer ``(H, L, S)`` or one head ``(L, S)``; NumPy, PyTorch or JAX.
        tokens: L query labels (default positions); also the key labels when S == L.
        key_tokens: S key labels, when the keys are other tokens.
        title: the page title.
        rollout: add the attention rollout (``attnkit.viz.rollout``, one entry per depth)
            as a last "layer"; default: when L == S.
        layer, head, view: what the page shows first: a layer index (``N`` is the
            rollout), a head index or ``"mean"``, ``"max"``, ``"all"``, and
            ``"lines"`` or ``"heatmap"``.
        color_scale: ``"linear"`` (colour proportional to the weight) or ``"sqrt"``
            (brightens weak weights: long inputs); the page can switch it.
        compress: deflate the weights (the page then needs DecompressionStream: Chrome 80,
            Firefox 113, Safari 16.4 or newer); False makes a larger page for any browser.
    """

    def __init__(
        self,
        weights: Any,
        tokens: Any = None,
        *,
        key_tokens: Any = None,
        title: str = "attention",
        rollout: bool | None = None,
        layer: int = 0,
        head: int | str = 0,
        view: str = "lines",
        color_scale: str = "linear",
        compress: bool = True,
    ) -> None:
        xp, w = _as_stack(weights)
        N, H, L, S = w.shape
        q = check_tokens("tokens", tokens, L, "queries (axis -2)")
        same = key_tokens is None and tokens is not None and L == S
        k = q if same else check_tokens("key_tokens", key_tokens, S, "keys (axis -1)")
        with_rollout = (L == S) if rollout is None else bool(rollout)
        if with_rollout and L != S:
            raise ShapeError(
                f"rollout=True needs self-attention (L == S), got weights {describe(w)}; "
                "pass rollout=False."
            )
        check_choice("view", view, VIEWS)
        check_choice("color_scale", color_scale, COLOR_SCALES)
        layers = N + int(with_rollout)
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < layers:
            extra = f" ({N} is the rollout)" if with_rollout else ""
            raise ParameterError(f"layer must be an int in 0..{layers - 1}{extra}, got {layer!r}.")
        heads = N if with_rollout and layer == N else H
        if isinstance(head, str):
            check_choice("head", head, tuple(str(h) for h in range(heads)) + _HEAD_CHOICES)
        elif isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < heads:
            raise ParameterError(
                f"head must be an int in 0..{heads - 1} or one of 'mean', 'max', 'all', "
                f"got {head!r}."
            )
        if head in _HEAD_CHOICES and (H == 1 or layer == N):
            head = 0  # one head (or the rollout): nothing to combine
        entries = []
        for n in range(N):
            entries.append(
                self._entry(
                    xp,
                    w[n],
                    f"layer {n}",
                    [f"head {h}" for h in range(H)],
                    aggregates=True,
                    compress=compress,
                )
            )
        if with_rollout:
            r = _rollout(w, all_layers=True)  # (N, L, L)
            names = [f"through layer {n}" for n in range(N)]
            entries.append(
                self._entry(xp, r, "rollout", names, aggregates=False, compress=compress)
            )
        self.title = str(title)
        self.shape = (N, H, L, S)
        self._payload = {
            "meta": f"{N} layer(s) x {H} head(s), {L} queries x {S} keys"
            + (", rollout" if with_rollout else ""),
            "queries": q,
            "keys": k,
            "encoding": "u8-deflate" if compress else "u8",
            "layers": entries,
            "initial": {"layer": layer, "head": str(head), "view": view, "scale": color_scale},
        }

    @staticmethod
    def _entry(
        xp: Any, w: Any, name: str, heads: list[str], *, aggregates: bool, compress: bool
    ) -> dict[str, Any]:
        codes, scales = _quantize(xp, w)
        if compress:
            codes = zlib.compress(codes, 6)
        data = base64.b64encode(codes).decode("ascii")
        return {
            "name": name,
            "heads": heads,
            "scales": scales,
            "aggregates": aggregates,
            "data": data,
        }

    def to_html(self) -> str:
        """The whole page as one string (UTF-8 text, no external references)."""
        page = resources.files(__package__).joinpath("page.html").read_text(encoding="utf-8")
        script = resources.files(__package__).joinpath("page.js").read_text(encoding="utf-8")
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
        height = min(900, 160 + 16 * max(L, S))
        return (
            f'<iframe srcdoc="{html.escape(self.to_html(), quote=True)}" '
            f'style="width: 100%; height: {height}px; border: 0" '
            f'title="{html.escape(self.title)}"></iframe>'
        )

    def __repr__(self) -> str:
        N, H, L, S = self.shape
        return f"AttentionView({self.title!r}, layers={N}, heads={H}, L={L}, S={S})"


def to_html(weights: Any, tokens: Any = None, **options: Any) -> str:
    """The interactive page of ``weights`` as a string: ``AttentionView(...).to_html()``.

    Takes the same arguments as :class:`AttentionView`.
    """
    return AttentionView(weights, tokens, **options).to_html()
